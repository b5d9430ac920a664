"""The provider watcher: one loop per metadata item, every new, changed or ended notice handed on.

`Tracker` is the pure part: given what a source reports now, it returns the notices that are
news (a new event, a changed one, one that disappeared, which has ended). `Watcher` runs one
thread per source, so a long-poll never delays a poll. A metadata service that is absent, slow
or answers garbage is logged once (and again only after it recovered), retried with a capped
backoff, and never stops anything: the loops end only when the agent stops them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from xce_agent.config.cloud import PROVIDERS, CloudConfig
from xce_agent.notices.fetch import BoundedHttp, MetadataError
from xce_agent.notices.observed import MetadataGarbage, Observed
from xce_agent.notices.sources import AzureSource, Source, sources_for
from xce_protocol.notices import Impact, Notice, NoticeKind, NoticeState

log = logging.getLogger(__name__)

MAX_ERROR_PAUSE = 10.0


END_AFTER = 2  # readings in a row without an event before it counts as over


class Tracker:
    """The notices each source reports, and what changed since its last reading.

    An event ends only once `END_AFTER` readings in a row lack it: one answer of a flapping
    metadata service without it would otherwise reopen a host just before the platform acts.
    (A long-poll's reading, which comes when the value changed, ends it at once.)
    """

    def __init__(self, provider: str, end_after: int = END_AFTER) -> None:
        self.provider = provider
        self.end_after = end_after
        self._current: dict[str, dict[str, Notice]] = {}
        self._missing: dict[str, dict[str, int]] = {}  # readings in a row without the event
        self._first_seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def update(
        self, source: str, observed: list[Observed], now: float, end_after: int | None = None
    ) -> list[Notice]:
        """What is news in this reading; `end_after` overrides the readings an end needs."""
        needed = self.end_after if end_after is None else end_after
        with self._lock:
            before = self._current.get(source, {})
            missing = self._missing.setdefault(source, {})
            after: dict[str, Notice] = {}
            for obs in _most_severe_per_event(observed):
                first = self._first_seen.setdefault(obs.event_id, now)
                after[obs.event_id] = self._notice(obs, first, before.get(obs.event_id))
                missing.pop(obs.event_id, None)
            news = [n for key, n in after.items() if before.get(key) != n]
            for key, gone in before.items():
                if key in after:
                    continue
                missing[key] = missing.get(key, 0) + 1
                if missing[key] < needed:
                    after[key] = gone  # not over yet: it may be back in the next answer
                    continue
                del missing[key]
                self._first_seen.pop(key, None)
                news.append(replace(gone, state=NoticeState.ENDED))
            self._current[source] = after
            return news

    def active(self) -> list[Notice]:
        with self._lock:
            return [n for notices in self._current.values() for n in notices.values()]

    def knows(self, event_id: str) -> bool:
        """Whether some source reports the event now."""
        return any(n.event_id == event_id for n in self.active())

    def _notice(self, obs: Observed, first: float, known: Notice | None) -> Notice:
        deadline = obs.deadline
        if deadline is None and known is not None:
            deadline = known.deadline  # e.g. a Scheduled event now Started keeps its time
        elif deadline is None and obs.lead is not None:
            deadline = first + obs.lead
        return Notice(
            obs.kind,
            self.provider,
            obs.event_id,
            deadline,
            NoticeState.ACTIVE,
            obs.impact,
            obs.raw,
        )


_RANK = {
    NoticeKind.REBALANCE: 1,
    NoticeKind.MAINTENANCE: 2,
    NoticeKind.TERMINATION: 4,
    NoticeKind.PREEMPTION: 4,
    NoticeKind.SHUTDOWN: 5,
}


def _most_severe_per_event(observed: list[Observed]) -> list[Observed]:
    """One event per id: a document listing an id twice (a Freeze and a Preempt, say) is
    taken at its most severe, whatever the order, so a preemption is never read as a pause."""
    chosen: dict[str, Observed] = {}
    for obs in observed:
        rank = _RANK[obs.kind] + (obs.impact is Impact.REBOOT)
        known = chosen.get(obs.event_id)
        if known is None or rank > _RANK[known.kind] + (known.impact is Impact.REBOOT):
            chosen[obs.event_id] = obs
    return list(chosen.values())


class Watcher:
    def __init__(
        self,
        provider: str,
        sources: list[Source],
        on_notice: Callable[[Notice], None],
        poll_interval: float,
        wall: Callable[[], float] = time.time,
        abort: Callable[[], None] | None = None,
    ) -> None:
        self.provider = provider
        self.sources = sources
        self.on_notice = on_notice
        self.poll_interval = poll_interval
        self.wall = wall
        self._abort = abort  # ends requests in flight, so stop does not wait for a long-poll
        self.tracker = Tracker(provider)
        self.stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._read: set[str] = set()  # sources read once (their first answer is immediate)
        self._known: set[str] = set()  # sources whose reading the tracker holds

    def start(self) -> None:
        log.info(
            "watching %s metadata for notices (%s)",
            self.provider,
            ", ".join(s.name for s in self.sources),
        )
        for source in self.sources:
            thread = threading.Thread(
                target=self._loop, args=(source,), name=f"notices {source.name}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        self.stopped.set()
        if self._abort is not None:
            self._abort()

    def join(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, end - time.monotonic()))

    def ready(self) -> bool:
        """Every source was read since the start: what the tracker lacks is not there."""
        return all(s.name in self._known for s in self.sources)

    def acknowledge(self, event_ids: list[str]) -> bool:
        """Tell the platform it may go ahead (Azure StartRequests); True once settled (see
        AzureSource.acknowledge), False where not supported or when it failed."""
        for source in self.sources:
            if isinstance(source, AzureSource):
                return source.acknowledge(event_ids)
        return False

    def _loop(self, source: Source) -> None:
        failures = 0
        while not self.stopped.is_set():
            started = time.monotonic()
            try:
                observed = source.observe()
            except MetadataGarbage as exc:
                if self.stopped.is_set():
                    return
                failures += 1
                self._failed(source, exc, failures)
                if exc.observed is None:
                    self._pause(failures)
                    continue
                observed = exc.observed  # the valid part: acted on, and polled as usual
            except MetadataError as exc:
                if self.stopped.is_set():
                    return
                failures += 1
                self._failed(source, exc, failures)
                self._pause(failures)
                continue
            except Exception:  # a bug in a parser must not end the watch
                failures += 1
                if failures == 1:
                    log.exception("%s: reading the metadata failed", source.name)
                self.stopped.wait(MAX_ERROR_PAUSE)
                continue
            else:
                if failures:
                    log.info("%s: metadata answers again", source.name)
                failures = 0
            if self.stopped.is_set():
                return
            # A long-poll answers when the value changed: its reading is the server's word.
            ends = 1 if source.long_poll else None
            news = self.tracker.update(source.name, observed, self.wall(), ends)
            self._known.add(source.name)
            for notice in news:
                self._hand_on(notice)
            # A long-poll that comes back at once with nothing new ignores wait_for_change:
            # pace it like a poll rather than spin.
            quick = time.monotonic() - started < self.poll_interval
            if not source.long_poll or (quick and not news and self._seen(source)):
                self.stopped.wait(self.poll_interval)
            self._read.add(source.name)

    def _pause(self, failures: int) -> None:
        self.stopped.wait(min(MAX_ERROR_PAUSE, self.poll_interval * 2 ** min(failures - 1, 4)))

    def _seen(self, source: Source) -> bool:
        return source.name in self._read

    def _failed(self, source: Source, exc: Exception, failures: int) -> None:
        if failures == 1:
            log.warning("%s: metadata unavailable, notices may be missed: %s", source.name, exc)
        else:
            log.debug("%s: still unavailable: %s", source.name, exc)

    def _hand_on(self, notice: Notice) -> None:
        log.info(
            "%s notice %s %s (%s)%s",
            self.provider,
            notice.kind.value,
            notice.state.value,
            notice.event_id,
            "" if notice.deadline is None else f", platform acts at {notice.deadline:.0f}",
        )
        try:
            self.on_notice(notice)
        except Exception:
            log.exception("handing on a notice failed")


def watcher_for(config: CloudConfig, on_notice: Callable[[Notice], None]) -> Watcher | None:
    """The watcher the config asks for; None when no provider is watched."""
    if config.provider not in PROVIDERS:
        return None
    http = BoundedHttp()
    sources = sources_for(config.provider, http, config.metadata_url)
    return Watcher(config.provider, sources, on_notice, config.poll_interval, abort=http.abort)
