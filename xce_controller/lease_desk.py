"""The live leases: the lease machine's decisions stored before they are answered.

Owns the lease book. Expiries run on the monotonic clock, so a wall-clock step can neither
hand a lease out early nor keep it forever; grants and releases are committed (fsync) with
their facts before the answer leaves, so a fencing token is never handed out twice.
Watchers (the metrics) hear of what was stored, of renewals, and of each grant that ran out
unreleased, once, when a request, a listing or a scrape first finds it expired.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from xce_controller.core import leases
from xce_controller.core.lifecycle import Refused
from xce_controller.core.model import Fact
from xce_controller.store.base import Store

log = logging.getLogger(__name__)

# Every lease ever granted stays (its token must never repeat): a row, its facts and its metric
# series. A cluster needs a few (the provisioner's); any host credential could otherwise create
# new names without end.
MAX_LEASES = 256


class LeaseWatcher(Protocol):
    def committed(self, facts: list[Fact]) -> None: ...
    def renewed(self, lease: leases.Lease) -> None: ...
    def expired(self, lease: leases.Lease) -> None: ...


class LeaseDesk:
    def __init__(
        self,
        store: Store,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.monotonic = monotonic
        self.wall = wall
        self.started = monotonic()
        self.book = leases.restored(stored(store).leases.values(), self.started)
        self.watchers: list[LeaseWatcher] = []
        self.on_commit: list[Callable[[list[Fact]], None]] = []  # stored facts (events stream)
        self._told: dict[str, int] = {}  # lease -> the token whose expiry watchers heard of

    def _step(self, event: leases.Event) -> leases.Lease:
        now = self.monotonic()
        self._notice_expiries(now)
        book, facts, answer = leases.step(self.book, event, now)
        if facts:
            rows = [leases.to_row(book.get(str(f.data["lease"]))) for f in facts]
            self.store.commit_leases(facts, rows)
        self.book = book
        if facts:
            for listener in self.on_commit:
                listener(facts)
        for watcher in self.watchers:
            if facts:
                watcher.committed(facts)
            elif isinstance(event, leases.Acquire) and isinstance(answer, leases.Held):
                watcher.renewed(answer.lease)
        if isinstance(answer, leases.Busy):
            raise _busy(answer, now)
        return answer.lease

    def notice_expiries(self) -> None:
        self._notice_expiries(self.monotonic())

    def _notice_expiries(self, now: float) -> None:
        for lease in leases.expired(self.book, now):
            if self._told.get(lease.name) != lease.token:
                self._told[lease.name] = lease.token
                for watcher in self.watchers:
                    watcher.expired(lease)

    def acquire(
        self, name: str, host: str, session: str, ttl: float, key: str = ""
    ) -> leases.Lease:
        _check_name(name)
        if name not in self.book.leases and len(self.book.leases) >= MAX_LEASES:
            raise Refused(
                "lease_limit",
                409,
                f"the controller keeps at most {MAX_LEASES} leases, and {name} would be a new one",
            )
        return self._step(leases.Acquire(name, host, session, ttl, self.wall(), key))

    def release(self, name: str, host: str, session: str, key: str = "") -> leases.Lease:
        _check_name(name)
        return self._step(leases.Release(name, host, session, self.wall(), key))

    def describe(self, lease: leases.Lease) -> dict[str, Any]:
        """A lease as the API shows it: expiry as seconds from now and as a wall time."""
        now = self.monotonic()
        live = lease.live(now)
        left = lease.expires - now if live else None
        return {
            "lease": lease.name,
            "state": "held" if live else ("expired" if lease.held else "free"),
            "host": lease.host if live else "",
            "session": lease.session if live else "",
            "token": lease.token,
            "ttl": lease.ttl,
            "expires_in": left,
            "expires_at": self.wall() + left if left is not None else None,
            "granted_at": lease.granted_at or None,
            "last_holder": lease.last_host or lease.host,
        }

    def listing(self) -> list[dict[str, Any]]:
        self.notice_expiries()
        return [self.describe(self.book.leases[n]) for n in sorted(self.book.leases)]


def stored(store: Store) -> leases.Book:
    """The leases as stored; from the lease facts if a row cannot be read (a damaged
    database), so that a fencing token is never handed out twice all the same."""
    try:
        return leases.Book({le.name: le for le in map(leases.from_row, store.leases())})
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        log.warning(
            "lease rows unreadable (%s: %s): rebuilt from the lease facts", type(exc).__name__, exc
        )
        return leases.replay(store.lease_facts())


def _check_name(name: str) -> None:
    if not leases.is_lease_name(name):
        raise Refused("bad_request", 422, f"{name[:80]!r} is not a lease name")


def _busy(answer: leases.Busy, now: float) -> Refused:
    lease = answer.lease
    return Refused(
        "lease_held",
        409,
        f"lease {lease.name} is {answer.why} (token {lease.token}) for "
        f"{max(0.0, lease.expires - now):.1f}s more",
        host=lease.host,
        token=lease.token,
        expires_in=max(0.0, lease.expires - now),
    )
