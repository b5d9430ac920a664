"""Leases: named locks a host holds by renewing them, each grant with a fencing token.

A pure machine, `step(book, event, now) -> (book, facts, answer)`: `now` is the controller's
monotonic clock (expiry is an interval, never a wall-clock time); the facts are what must be
stored before the answer leaves. A grant (a new holder, or the same holder after its lease
expired) takes the next fencing token of that lease and is a fact; a renewal of a live lease
only moves its expiry and is not. A release is a fact. Each fact carries its reason code:
a grant of a free lease, a takeover from a holder whose grant expired, or a new grant to a
holder whose own grant expired; a release.

The holder is a host and the agent run on it (`session`): an agent that restarts is a new
holder and waits for the old grant to expire, since its predecessor's component may still
be running until then. After a controller restart the expiry of every held lease is unknown:
`restored` treats each as held until one full TTL after the start, so only its recorded
holder may renew it before then.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Union

from xce_controller.core.model import Fact
from xce_protocol import names
from xce_protocol.reasons import Reason

GRANTED = "lease_granted"
RELEASED = "lease_released"
FORGOTTEN = "lease_forgotten"
KINDS = (GRANTED, RELEASED, FORGOTTEN)

SESSION = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
TTL_MIN = 0.5
TTL_MAX = 3600.0
is_lease_name = names.is_lease_name


@dataclass(frozen=True)
class Lease:
    name: str
    token: int = 0  # the fencing token of the latest grant; 0: never granted
    host: str = ""  # the holder's host name; "" while free
    session: str = ""  # the holder's agent run
    ttl: float = 0.0
    expires: float = 0.0  # monotonic; meaningful while held
    granted_at: float = 0.0  # wall clock of the latest grant (shown, never compared)
    key: str = ""  # the holder's host record (its facts appear in that host's story)
    last_host: str = ""  # who held it last, kept when it is released (shown)
    freed: float = 0.0  # monotonic; when a release freed it (see `idle_since`)

    @property
    def held(self) -> bool:
        return bool(self.host)

    def live(self, now: float) -> bool:
        return self.held and now < self.expires

    def holds(self, host: str, session: str) -> bool:
        return self.held and (self.host, self.session) == (host, session)

    def idle_since(self, now: float) -> float | None:
        """Since when no one holds it (a release, or the expiry of the last grant); None
        while it is held."""
        if self.live(now):
            return None
        return self.expires if self.held else self.freed


@dataclass(frozen=True)
class Book:
    leases: Mapping[str, Lease]
    # The highest token of every lease forgotten: a name taken again starts above it, so no
    # fencing token of a name ever repeats, though its row is gone.
    floor: int = 0

    def get(self, name: str) -> Lease:
        return self.leases.get(name) or Lease(name)

    def put(self, lease: Lease) -> Book:
        return Book({**self.leases, lease.name: lease}, self.floor)

    def forget(self, name: str) -> Book:
        lease = self.get(name)
        rest = {n: le for n, le in self.leases.items() if n != name}
        return Book(rest, max(self.floor, lease.token))

    def first_token(self, lease: Lease) -> int:
        """The token the next grant of `lease` takes."""
        return (lease.token or self.floor) + 1

    def names_of(self, host: str) -> int:
        """How many lease names `host` holds or held last (a host's bound counts them)."""
        return sum(1 for le in self.leases.values() if (le.host or le.last_host) == host)


EMPTY = Book({})


@dataclass(frozen=True)
class Acquire:
    """Take or renew `name` for `ttl` seconds."""

    name: str
    host: str
    session: str
    ttl: float
    wall: float  # the wall clock now, recorded in a grant
    key: str = ""  # the caller's host record


@dataclass(frozen=True)
class Release:
    name: str
    host: str
    session: str
    wall: float
    key: str = ""


Event = Union[Acquire, Release]


@dataclass(frozen=True)
class Held:
    """The answer to an acquire or release: the lease as it now stands."""

    lease: Lease


@dataclass(frozen=True)
class Busy:
    """Refused: another holder has the lease until `lease.expires`."""

    lease: Lease
    why: str


Answer = Union[Held, Busy]


def step(book: Book, event: Event, now: float) -> tuple[Book, list[Fact], Answer]:
    if isinstance(event, Acquire):
        return _acquire(book, event, now)
    return _release(book, event, now)


def _acquire(book: Book, ev: Acquire, now: float) -> tuple[Book, list[Fact], Answer]:
    lease = book.get(ev.name)
    if lease.live(now):
        if lease.holds(ev.host, ev.session):
            if ev.ttl != lease.ttl:  # the restart rule relies on the recorded TTL
                return book, [], Busy(lease, f"held with ttl {lease.ttl:g}s, not {ev.ttl:g}s")
            renewed = replace(lease, expires=now + ev.ttl)
            return book.put(renewed), [], Held(renewed)
        return book, [], Busy(lease, f"held by {lease.host}")
    fact = Fact(
        GRANTED,
        ev.wall,
        ev.host,
        {
            "lease": ev.name,
            "host": ev.host,
            "session": ev.session,
            "token": book.first_token(lease),
            "ttl": ev.ttl,
            "code": grant_code(lease, ev).value,
            "previous": lease.host,
            "key": ev.key,
            "previous_key": lease.key if lease.held else "",
        },
    )
    after = apply(book, fact, now)
    return after, [fact], Held(after.get(ev.name))


def _release(book: Book, ev: Release, now: float) -> tuple[Book, list[Fact], Answer]:
    lease = book.get(ev.name)
    if not lease.holds(ev.host, ev.session):
        if lease.live(now):
            return book, [], Busy(lease, f"held by {lease.host}, not by this agent")
        return book, [], Held(lease)  # already free or expired: nothing to give back
    fact = Fact(
        RELEASED,
        ev.wall,
        ev.host,
        {
            "lease": ev.name,
            "host": ev.host,
            "session": ev.session,
            "token": lease.token,
            "code": Reason.LEASE_RELEASED.value,
            "key": ev.key,
        },
    )
    after = apply(book, fact, now)
    return after, [fact], Held(after.get(ev.name))


def grant_code(lease: Lease, ev: Acquire) -> Reason:
    """Why a lease that is not live is granted: it was free, or its holder's grant expired
    (the same holder again, or another one taking over)."""
    if not lease.held:
        return Reason.LEASE_GRANTED
    return Reason.LEASE_REGRANTED if lease.holds(ev.host, ev.session) else Reason.LEASE_TAKEN_OVER


def expired(book: Book, now: float) -> list[Lease]:
    """The leases whose holder's grant ran out with neither a renewal nor a release."""
    return [le for le in book.leases.values() if le.held and not le.live(now)]


def stale(book: Book, now: float, retention: float) -> list[Lease]:
    """The leases no one has held for `retention` seconds: their names may be forgotten."""
    found = []
    for lease in book.leases.values():
        idle = lease.idle_since(now)
        if idle is not None and now - idle >= retention:
            found.append(lease)
    return found


def forget(book: Book, names: Iterable[str], wall: float) -> tuple[Book, list[Fact]]:
    """Forget stale lease names: one fact each, its token kept in the book's floor."""
    facts = []
    for name in names:
        lease = book.get(name)
        facts.append(
            Fact(
                FORGOTTEN,
                wall,
                "controller",
                {
                    "lease": name,
                    "token": lease.token,
                    "code": Reason.LEASE_FORGOTTEN.value,
                    "last_host": lease.last_host,
                },
            )
        )
        book = book.forget(name)
    return book, facts


def apply(book: Book, fact: Fact, now: float) -> Book:
    """The book after a stored lease fact; `now` starts a grant's TTL or frees it."""
    d = fact.data
    if fact.kind == FORGOTTEN:
        return _floor(book.forget(str(d["lease"])), d)
    lease = book.get(str(d["lease"]))
    if fact.kind == GRANTED:
        return book.put(
            replace(
                lease,
                token=max(lease.token, int(d["token"])),
                host=str(d["host"]),
                session=str(d["session"]),
                ttl=float(d["ttl"]),
                expires=now + float(d["ttl"]),
                granted_at=fact.at,
                key=str(d.get("key", "")),
                last_host=str(d["host"]),
            )
        )
    if fact.kind == RELEASED and lease.holds(str(d["host"]), str(d["session"])):
        return book.put(replace(lease, host="", session="", expires=0.0, key="", freed=now))
    return book


def _floor(book: Book, d: Mapping[str, Any]) -> Book:
    return Book(book.leases, max(book.floor, int(d.get("token", 0))))


def restored(leases: Iterable[Lease], started: float, floor: int = 0) -> Book:
    """The book after a controller (re)start at monotonic `started`: a lease held when the
    controller went down may be in use for up to its TTL more, by the holder that was
    renewing it. Nobody else gets it before then. A free one counts as freed at the start."""
    return Book(
        {
            le.name: replace(le, expires=started + le.ttl, freed=0.0)
            if le.held
            else replace(le, expires=0.0, freed=started)
            for le in leases
        },
        floor,
    )


def replay(facts: Iterable[Fact]) -> Book:
    """The leases the stored facts leave (expiries aside: see `restored`)."""
    book = EMPTY
    for fact in facts:
        if fact.kind in KINDS:
            book = apply(book, fact, 0.0)
    return book


def to_row(lease: Lease) -> dict[str, Any]:
    """What is stored of a lease: everything but the expiry (unknowable after a restart)."""
    return {
        "name": lease.name,
        "token": lease.token,
        "host": lease.host,
        "session": lease.session,
        "ttl": lease.ttl,
        "granted_at": lease.granted_at,
        "key": lease.key,
        "last_host": lease.last_host,
    }


def from_row(row: Mapping[str, Any]) -> Lease:
    """A stored lease; ValueError for a row no grant could have written (a damaged store)."""
    token, ttl = row["token"], float(row["ttl"])
    if not isinstance(token, int) or isinstance(token, bool) or token < 1:
        raise ValueError(f"lease {row['name']!r}: token {token!r}")
    if not TTL_MIN <= ttl <= TTL_MAX:  # NaN too
        raise ValueError(f"lease {row['name']!r}: ttl {ttl!r}")
    return Lease(
        name=str(row["name"]),
        token=int(row["token"]),
        host=str(row["host"]),
        session=str(row["session"]),
        ttl=float(row["ttl"]),
        granted_at=float(row["granted_at"]),
        key=str(row.get("key", "")),
        last_host=str(row.get("last_host", row["host"])),
    )
