"""The events stream: committed facts, in order, as they are committed.

Followers wait on a notification the controller gives after each commit (no polling) and
then read what is new from the database, which is the only buffer: a slow reader costs one
indexed query per wake-up and no memory, and a reader that reconnects with the last sequence
number it saw misses nothing. Secrets in facts (token hashes) never leave.

A stream's first read (`page`) can be made before its answer begins: a store that cannot be
read then fails the request (503, as every other endpoint answers it) instead of a stream
already answered 200 and broken off, which a client cannot tell from a cut connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from xce_controller.core.model import Cluster, Fact, fold
from xce_controller.service import Controller

PAGE = 500  # facts read per query
MAX_SEQ = 2**63 - 1  # SQLite's largest integer: a larger cursor cannot be compared
KEEPALIVE = 15.0  # seconds: an idle stream sends a blank line so dead peers are noticed
_SECRET_HINTS = ("token", "secret", "credential", "password", "hash")
# What identifies a boot of a host (a clone's, a thief's): the admin's to see, not a reader's.
ADMIN_ONLY = ("boot_id",)


@dataclass(frozen=True)
class Event:
    seq: int
    fact: Fact
    key: str  # the host the fact is about ("" for a job not on a host)

    def to_json(self, cluster: Cluster, admin: bool = False) -> dict[str, Any]:
        """The event as a follower sees it: never a secret or its hash; boot ids only for
        the admin."""
        d = self.fact.data
        host = cluster.hosts.get(self.key)
        name = (host.name or host.expected_name) if host is not None else ""
        body: dict[str, Any] = {
            "seq": self.seq,
            "at": self.fact.at,
            "kind": self.fact.kind,
            "by": self.fact.by,
            "key": self.key,
            "host": name or d.get("name", "") or d.get("host", "") or self.key,
            "instance_id": host.instance_id if host is not None else d.get("instance_id", ""),
            "why": d.get("why", ""),
            "code": d.get("code", ""),
            "data": {k: v for k, v in d.items() if self._shown(k, admin)},
        }
        if self.fact.kind == "state":
            body["state"] = d.get("state", "")
        if self.fact.kind.startswith("job_") and "id" in d:
            body["job"] = d["id"]  # the job it is about: its facts' rows name it
        return body

    def _shown(self, name: str, admin: bool) -> bool:
        if name in ADMIN_ONLY:
            return admin
        return not _secret(name) or self._public(name)

    def _public(self, name: str) -> bool:
        """A lease's fencing token is no secret: it is what the holder shows others."""
        return name == "token" and self.fact.kind in ("lease_granted", "lease_released")


def _lost_by(event: Event) -> str:
    return (
        str(event.fact.data.get("previous_key", "")) if event.fact.kind == "lease_granted" else ""
    )


def _secret(name: str) -> bool:
    return any(hint in name.lower() for hint in _SECRET_HINTS)


@dataclass(frozen=True)
class Page:
    """One read of a stream: its events, the last sequence number it covered, whether more
    may be stored after it, and the commit count taken before it began (a commit counted
    since is read at once, not waited for)."""

    events: list[Event]
    last: int
    more: bool
    seen: int
    jobs: dict[int, str]  # the reader's own job -> host map, carried from page to page


class EventHub:
    """Wakes followers after each commit; reads events back from the store."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self._waiters: list[asyncio.Future[None]] = []
        self.commits = 0  # batches committed since start: a follower's "anything new?"
        self.stopping = False  # the controller is stopping: followers end their streams
        # name, key or instance id -> host keys, as of a cluster version (host_keys)
        self._names: dict[str, set[str]] = {}
        self._names_version = -1
        self._names_of: object = None
        # job id -> host key, to tell which host a job fact is about (the facts of a
        # started, finished or requeued job name only the job).
        self._job_host = {j.id: j.assigned for j in ctl.cluster.jobs.values() if j.assigned}
        ctl.on_commit.append(self._committed)
        ctl.on_release.append(self._release)

    def _committed(self, facts: list[Fact]) -> None:
        for fact in facts:
            if fact.kind == "job_assigned":
                self._job_host[int(fact.data["id"])] = str(fact.data["key"])
        self.commits += 1
        self._wake()

    def _release(self) -> None:
        """A stream that never ends would hold a stopping server: Debian 12's uvicorn waits
        for it without a bound, newer ones cut it off after their grace with a traceback.
        Each follower ends its answer cleanly instead and resumes, after the restart, with
        the last `seq` it got."""
        self.stopping = True
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def host_keys(self, name: str) -> set[str]:
        """Every record (incarnation) a host name, key or instance id refers to. Read from
        an index built once per committed version and shared by every follower: a scan of
        every host per follower per commit stalled the controller for seconds with a few
        thousand of each."""
        cluster = self.ctl.cluster
        if self._names_version != cluster.version or self._names_of is not cluster.hosts:
            index: dict[str, set[str]] = {}
            for h in cluster.hosts.values():
                # Keys and instance ids as they are; host names without regard to case.
                for ref in {h.key, h.instance_id, fold(h.name), fold(h.expected_name)}:
                    index.setdefault(ref, set()).add(h.key)
            self._names, self._names_version, self._names_of = index, cluster.version, cluster.hosts
        return set(self._names.get(name, ())) | set(self._names.get(fold(name), ()))

    def read(
        self, since: int, keys: set[str] | None, jobs: dict[int, str]
    ) -> tuple[list[Event], int, bool]:
        """Events after `since` (about `keys` if given), oldest first; the last sequence
        number the read covered; whether more may be stored after it. `jobs` is the reader's
        own job -> host map, carried from page to page."""
        rows = self.ctl.store.events_after(since, keys, PAGE)
        events = [self._event(seq, fact, jobs) for seq, fact in rows]
        covered = int(rows[-1][0]) if rows else since
        if keys is not None:
            # A lease taken over is about the host that lost it too.
            events = [e for e in events if e.key in keys or _lost_by(e) in keys]
        return events, covered, len(rows) == PAGE

    def last_seq(self) -> int:
        return self.ctl.store.last_seq()

    def _event(self, seq: int, fact: Fact, jobs: dict[int, str]) -> Event:
        d = fact.data
        if fact.kind in ("job_submitted", "job_waiting"):
            return Event(seq, fact, "")  # about no host (yet, or any more)
        if fact.kind.startswith("job_") and "id" in d:
            job_id = int(d["id"])
            if fact.kind == "job_assigned":
                jobs[job_id] = str(d["key"])
            if "key" in d:
                return Event(seq, fact, str(d["key"]))
            # Placed before this read began: the live map, else where the job is now.
            job = self.ctl.cluster.jobs.get(job_id)
            key = jobs.get(job_id) or self._job_host.get(job_id) or (job.assigned if job else "")
            return Event(seq, fact, key)
        return Event(seq, fact, str(d.get("key") or d.get("instance_id", "")))

    async def wait(self, timeout: float) -> bool:
        """Until the next commit (True) or the timeout (False)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)

    def page(self, since: int, host: str, jobs: dict[int, str] | None = None) -> Page:
        """The events after `since` (about `host` if given), one page; raises
        StorageUnavailable when the store cannot be read."""
        seen = self.commits
        # A name's records can grow (a new incarnation joins): resolve on every page.
        keys = self.host_keys(host) if host else None
        carried = {} if jobs is None else jobs
        events, last, more = self.read(since, keys, carried)
        return Page(events, last, more, seen, carried)

    async def stream(
        self,
        since: int,
        host: str,
        follow: bool,
        keepalive: float = KEEPALIVE,
        admin: bool = False,
        allowed: Callable[[], bool] = lambda: True,
        first: Page | None = None,
    ) -> AsyncIterator[dict[str, Any] | None]:
        """Event bodies after `since`; with `follow`, then each new one as it is committed,
        and None after `keepalive` seconds of quiet. The stream ends once `allowed()` says
        its reader may no longer read (its token changed, its session ended). `first` is its
        first page when the caller read it already (before its answer began)."""
        page = first or self.page(since, host)
        while True:
            if not allowed():
                return
            for event in page.events:
                yield event.to_json(self.ctl.cluster, admin)
            if not page.more:
                if not follow or self.stopping:
                    return
                # Commits made while the events above were being sent are read at once.
                if self.commits == page.seen and not await self.wait(keepalive):
                    yield None
            page = self.page(page.last, host, page.jobs)
