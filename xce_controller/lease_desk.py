"""The live leases: the lease machine's decisions stored before they are answered.

Owns the lease book. Expiries run on the monotonic clock, so a wall-clock step can neither
hand a lease out early nor keep it forever; grants and releases are committed (fsync) with
their facts before the answer leaves, so a fencing token is never handed out twice.
On a shared store (several replicas, docs/ha.md) the book is the store's: each decision is
taken under the lease's row lock on the database's clock, and the expiry is stored in the row,
so every replica sees the same holder, the same token and the same renewals; `monotonic` is
then the service's shared clock (the database's, advanced locally), which also dates the
lease facts, the rows' grant times and the expiries listed, as every other fact of a replica
is dated (`wall` is unused there: a replica's own wall clock, wrong, would store a grant out
of order with the facts around it and list another expiry than the other replicas do). The
book held here is a copy refreshed on every decision and listing. Names are not forgotten
there (a replica's copy could be stale), so the bound on names is the whole of it.
Watchers (the metrics) hear of what was stored, of renewals, and of each grant that ran out
unreleased, once, when a request, a listing or a scrape first finds it expired.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from xce_controller.core import leases
from xce_controller.core.lifecycle import Refused
from xce_controller.core.model import Fact
from xce_controller.store.base import SharedStore, StorageUnavailable, Store

log = logging.getLogger(__name__)

# A lease is a row, its facts and its metric series. A cluster needs a few (the
# provisioner's); any host credential could otherwise create new names without end. So each
# host may hold (or have held last) a few names, the whole cluster a bounded number, and a
# name no one held for the retention is forgotten (its token kept in the book's floor, so a
# name taken again never repeats a token).
MAX_LEASES = 1024
MAX_LEASES_PER_HOST = 16
LEASE_RETENTION = 3600.0  # seconds


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
        self.shared = store.shared
        # On a shared store times are the database's, the shared clock's (module docstring).
        self.wall = monotonic if self.shared else wall
        self.started = monotonic()
        if self.shared:  # the stored expiries are on the database's clock, as `monotonic`
            self.book = shared_book(store)
        else:
            book = stored(store)
            floor = max(book.floor, store.lease_floor())
            self.book = leases.restored(book.leases.values(), self.started, floor)
        self.watchers: list[LeaseWatcher] = []
        self.on_commit: list[Callable[[list[Fact]], None]] = []  # stored facts (events stream)
        self._told: dict[str, int] = {}  # lease -> the token whose expiry watchers heard of

    def _step(self, event: leases.Event) -> leases.Lease:
        if self.shared:
            book, facts, answer, now = self._step_shared(event)
        else:
            now = self.monotonic()
            self._notice_expiries(now)
            book, facts, answer = leases.step(self.book, event, now)
            if facts:
                rows = [leases.to_row(book.get(str(f.data["lease"]))) for f in facts]
                self.store.commit_leases(facts, rows)
        self.book = book
        if facts:
            self._told_of(facts)
        elif isinstance(event, leases.Acquire) and isinstance(answer, leases.Held):
            for watcher in self.watchers:
                watcher.renewed(answer.lease)
        if isinstance(answer, leases.Busy):
            raise _busy(answer, now)
        return answer.lease

    def _step_shared(
        self, event: leases.Event
    ) -> tuple[leases.Book, list[Fact], leases.Answer, float]:
        """The decision taken in the store's transaction, under the lease's row lock."""
        out: list[tuple[leases.Lease, list[Fact], leases.Answer, float]] = []
        floor = self.book.floor

        def decide(
            row: dict[str, Any] | None, now: float
        ) -> tuple[list[Fact], dict[str, Any] | None]:
            lease = _from_shared_row(row) if row else leases.Lease(event.name)
            one = leases.Book({event.name: lease}, floor)
            after, facts, answer = leases.step(one, event, now)
            new = after.get(event.name)
            out[:] = [(new, facts, answer, now)]
            if isinstance(answer, leases.Busy) or new.token == 0 or new == lease:
                return facts, None
            return facts, {**leases.to_row(new), "expires": new.expires}

        shared: SharedStore = self.store  # type: ignore[assignment]
        shared.lease_step(event.name, decide)
        new, facts, answer, now = out[0]
        book = self.book.put(new) if new.token else self.book
        self._notice_expiries(now, book)
        return book, facts, answer, now

    def refresh(self) -> None:
        """On a shared store: the book as the store has it now (other replicas' decisions)."""
        if self.shared:
            self.book = shared_book(self.store)

    def current(self, name: str) -> leases.Lease:
        """A lease as it now stands (on a shared store, as the store has it)."""
        self.refresh()
        return self.book.get(name)

    def _told_of(self, facts: list[Fact]) -> None:
        for listener in self.on_commit:
            listener(facts)
        for watcher in self.watchers:
            watcher.committed(facts)

    def forget_stale(self) -> None:
        """Forget the names no one held for LEASE_RETENTION (stored before they go)."""
        if self.shared:  # another replica may have granted it since this copy was read
            return
        stale = [le.name for le in leases.stale(self.book, self.monotonic(), LEASE_RETENTION)]
        if not stale:
            return
        book, facts = leases.forget(self.book, stale, self.wall())
        self.store.commit_leases(facts, [], forgotten=stale, floor=book.floor)
        self.book = book
        for name in stale:
            self._told.pop(name, None)
        self._told_of(facts)

    def notice_expiries(self) -> None:
        self._notice_expiries(self.monotonic())

    def _notice_expiries(self, now: float, book: leases.Book | None = None) -> None:
        for lease in leases.expired(book or self.book, now):
            if self._told.get(lease.name) != lease.token:
                self._told[lease.name] = lease.token
                for watcher in self.watchers:
                    watcher.expired(lease)

    def acquire(
        self, name: str, host: str, session: str, ttl: float, key: str = ""
    ) -> leases.Lease:
        _check_name(name)
        if name not in self.book.leases:
            self.refresh()
        if name not in self.book.leases:
            self._room_for(name, host)
        return self._step(leases.Acquire(name, host, session, ttl, self.wall(), key))

    def _room_for(self, name: str, host: str) -> None:
        """A new name: within the host's bound and the controller's, after forgetting the
        stale ones; Refused otherwise."""
        self.forget_stale()
        if self.book.names_of(host) >= MAX_LEASES_PER_HOST:
            raise Refused(
                "lease_host_limit",
                409,
                f"host {host} holds or last held {MAX_LEASES_PER_HOST} leases, the most a "
                f"host may; {name} would be a new one (a name no one holds for "
                f"{LEASE_RETENTION:g}s is forgotten)",
                limit=MAX_LEASES_PER_HOST,
            )
        if len(self.book.leases) >= MAX_LEASES:
            raise Refused(
                "lease_limit",
                409,
                f"the controller keeps at most {MAX_LEASES} leases, and {name} would be a new "
                f"one (a name no one holds for {LEASE_RETENTION:g}s is forgotten)",
                limit=MAX_LEASES,
            )

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
        self.refresh()
        self.notice_expiries()
        try:
            self.forget_stale()
        except StorageUnavailable as exc:  # shown as they are; the next new name tries again
            log.warning("stale leases not forgotten: %s", exc.cause)
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


def shared_book(store: Store) -> leases.Book:
    """The leases of a shared store with their stored expiries (database clock)."""
    floor = store.lease_floor()
    try:
        found = map(_from_shared_row, store.leases())
        return leases.Book({le.name: le for le in found}, floor)
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        # A damaged row: rebuilt from the facts (expiries unknown: every lease free).
        log.warning("lease rows unreadable (%s: %s)", type(exc).__name__, exc)
        book = leases.replay(store.lease_facts())
        return leases.Book(book.leases, max(book.floor, floor))


def _from_shared_row(row: dict[str, Any]) -> leases.Lease:
    lease = leases.from_row(row)
    return replace(lease, expires=float(row.get("expires", 0.0)) if lease.held else 0.0)


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
