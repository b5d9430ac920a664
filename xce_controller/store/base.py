"""What the controller needs of its durable store, whichever database holds it.

Two backends implement it, one module each: sqlite.py (the embedded default, one process)
and postgres.py (one database shared by any number of controller replicas). The core and the
service see only this interface; every SQL statement lives in the backend's own module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from xce_controller.core.model import Cluster, Fact

# A stored fact with its place in the log: (seq, fact).
Numbered = tuple[int, Fact]


FLOOR_ROW = ""  # the leases row that keeps the token floor: no lease is named ""


class StorageUnavailable(Exception):
    """The database refused a write; `cause` is the database's own words (disk full, I/O
    error, connection lost)."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


class OutcomeUnknown(StorageUnavailable):
    """The connection was lost after COMMIT was sent: the change may or may not be stored.
    The answer must say so (never "nothing was changed"), and a client must not send the
    change to another replica: it reads the outcome back, or retries a change that is
    idempotent (a join, a heartbeat, a report) where it was."""


class StaleState(Exception):
    """Another replica appended facts after this one last read the log: the change was decided
    on an old state and nothing of it was stored. The caller catches up and decides again."""


# Seconds, on average, before a change (or a timer pass) refused with LockBusy is decided
# again: the lock's holder does not go on, and trying at once would only spin the loop.
LOCK_PAUSE = 0.1


class LockBusy(StaleState):
    """The append lock (or a row's) was not granted within the lock timeout: nothing was
    stored. Decided again after a while, as a stale change is (the state may have moved
    meanwhile), the event loop free between the tries."""


class SchemaTooNew(Exception):
    """The database was migrated by a newer controller than this one."""


class SchemaDamaged(SchemaTooNew):
    """The database's schema record is not one version (rows deleted or added, the table
    dropped beside the store's tables): a schema this controller cannot use either, so it is
    caught where SchemaTooNew is."""


class Store(Protocol):
    """The facts, the state rows they produce, and what is kept beside them."""

    # True when other controller processes write the same store (postgres.py): the service
    # then reads what they appended before each decision, and shares heartbeat times.
    shared: bool

    def load(self) -> tuple[Cluster, dict[str, float]]:
        """The stored state (from the state tables) and the last heartbeat times."""

    def facts(self) -> list[Fact]:
        """Every fact, oldest first."""

    def replay(self) -> Cluster:
        """The state rebuilt from the facts alone."""

    def commit(
        self,
        facts: Iterable[Fact],
        cluster: Cluster,
        hosts: set[str],
        jobs: set[int],
        after: int | None = None,
    ) -> None:
        """Append facts and write the rows they changed, in one durable transaction. With
        `after`, refuse (StaleState) unless the log still ends at that sequence number."""

    def leases(self) -> list[dict[str, Any]]: ...

    def lease_floor(self) -> int:
        """The highest token of the leases forgotten (0: none)."""

    def lease_facts(self) -> list[Fact]: ...

    def commit_leases(
        self,
        facts: Iterable[Fact],
        rows: Iterable[dict[str, Any]],
        forgotten: Iterable[str] = (),
        floor: int = 0,
    ) -> None:
        """Append lease facts, write the rows they changed, delete the forgotten ones and
        keep the token floor, in one transaction."""

    def save_seen(self, seen: dict[str, float]) -> None: ...

    def save_report(self, key: str, report: dict[str, Any]) -> None: ...

    def reports(self) -> dict[str, dict[str, Any]]: ...

    def events_after(self, since: int, keys: set[str] | None, limit: int) -> list[Numbered]:
        """Facts after `since` (about the host records `keys`, when given), oldest first."""

    def facts_after(self, seq: int) -> list[Numbered]:
        """Every fact after `seq`, oldest first (what other replicas appended)."""

    def last_seq(self) -> int:
        """The sequence number of the newest fact (0 for none)."""

    def close(self) -> None: ...


class Listening(Protocol):
    """A running follower of the log (postgres.Listener)."""

    connected: Any  # threading.Event: set while its LISTEN connection is up
    cut: bool

    def stop(self) -> None: ...


class SharedStore(Store, Protocol):
    """A store several replicas write (postgres.py): what they share beside the facts."""

    def beat(self, key: str, at: float) -> None:
        """One host heard from (no fact, no notification)."""

    def seen_of(self, keys: Iterable[str]) -> dict[str, float]: ...

    def liveness_since(self) -> float:
        """When the shared heartbeat times last started empty (database clock)."""

    def reachable(self) -> bool:
        """False while the database is known unreachable (calls then fail at once)."""

    def unreachable_for(self) -> float:
        """Seconds the database has been known unreachable; 0 while it is reachable."""

    def unanswered(self, cause: str) -> None:
        """A read off the loop got no answer in time: take the database as unreachable."""

    @property
    def deadline_cuts(self) -> int:
        """Calls cut at their deadline since start: the database did not answer."""

    @property
    def lock_refusals(self) -> int:
        """Changes refused at once since start: a lock they need was held by a session that
        did not go on (lock_gate.py)."""

    def db_time(self) -> float:
        """The database's clock, seconds since the epoch."""

    def lease_step(
        self,
        name: str,
        decide: Callable[[dict[str, Any] | None, float], tuple[list[Fact], dict[str, Any] | None]],
    ) -> None:
        """One lease decided under its row lock on the database's clock (postgres.py)."""

    def listen(self, told: Callable[[int | None], None], poll: float) -> Any:
        """A started Listening that calls `told(head)` on each commit anywhere, and
        `told(None)` every `poll` seconds (from its own thread)."""
