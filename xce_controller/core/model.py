"""The controller's records: hosts (expected or joined), jobs, and the facts that change them.

Records are frozen; the cluster state is a set of dictionaries of them. A Fact is the unit of
persistence: every lifecycle change is one, and replaying them in order rebuilds the state.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


def evolve(record: T, **changes: Any) -> T:
    """A copy of a frozen record with some fields changed: dataclasses.replace without its
    per-call introspection, which dominated replaying millions of facts (the simulator).
    Only for the records here, which have no __post_init__ and no slots."""
    new = object.__new__(type(record))
    new.__dict__.update(record.__dict__)
    new.__dict__.update(changes)
    return new


class HostState(str, enum.Enum):
    EXPECTED = "expected"  # the provisioner recorded the instance; waiting for its join
    OVERDUE = "overdue"  # not joined by its deadline: to be returned
    OPEN = "open"  # joined, takes work
    CLOSED = "closed"  # joined, takes no new work (admin)
    DRAINING = "draining"  # decommission requested: waits for its jobs
    DECOMMISSIONED = "decommissioned"  # removed; its rejoin is refused
    LOST = "lost"  # missed heartbeats past the host-loss grace
    RETURNED = "returned"  # the provisioner acknowledged giving the instance back


class AdminAction(str, enum.Enum):
    """What an admin may ask of a joined host (the last part of its REST path)."""

    OPEN = "open"
    CLOSE = "close"
    DECOMMISSION = "decommission"

    @property
    def done(self) -> str:
        """The action in a host's reason: "closed by admin"."""
        return {"open": "opened", "close": "closed", "decommission": "decommissioned"}[self.value]


class JobEvent(str, enum.Enum):
    """What a worker reports about a job (the last part of its REST path)."""

    STARTED = "started"
    FINISHED = "finished"


class UnmatchedJoins(str, enum.Enum):
    """What the controller does with a join that matches no expected instance."""

    ACCEPT = "accept"  # join with the default template
    REFUSE = "refuse"


# States in which a host is gone from the cluster for good.
TERMINAL = (HostState.DECOMMISSIONED, HostState.RETURNED)
JOINED = (HostState.OPEN, HostState.CLOSED, HostState.DRAINING)


class DrainPolicy(str, enum.Enum):
    REQUEUE = "requeue"
    KILL = "kill"
    WAIT = "wait"


class JobState(str, enum.Enum):
    PENDING = "pending"
    ASSIGNED = "assigned"  # placed on a host, the worker has not reported it started
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    KILLED = "killed"


ACTIVE_JOB = (JobState.ASSIGNED, JobState.RUNNING)


@dataclass(frozen=True)
class Change:
    """One entry of a host's state history."""

    at: float
    state: HostState
    by: str
    why: str
    code: str = ""  # the reason code (xce_protocol.reasons); "" in records older than codes


@dataclass(frozen=True)
class PowerStep:
    """One step of the provisioner's effect journal on a machine (xce_provisioner): the
    controller decision it carries out, what it did and how that went. Stored as facts, so a
    provisioner that takes over the lease reads what its predecessor began and finished."""

    at: float
    decision: str  # "STATE@TIME" of the record's change the step carries out
    action: str  # on, shutdown, force_off, cycle, ack
    phase: str  # begun (intent, before the BMC call), issued, confirmed, failed, gave_up
    attempt: int = 1
    code: str = ""
    why: str = ""
    token: int = 0  # the provisioner's lease token (0: it runs without a lease)


@dataclass(frozen=True)
class Drain:
    started_at: float
    timeout: float | None  # None: policy wait, no deadline
    policy: DrainPolicy
    by: str
    why: str

    @property
    def deadline(self) -> float | None:
        return None if self.timeout is None else self.started_at + self.timeout


@dataclass(frozen=True)
class HostNotice:
    """The provider's warning a host is acting on (see xce_controller/core/notices.py)."""

    kind: str  # preemption, termination, maintenance, rebalance, shutdown
    provider: str
    event_id: str
    deadline: float | None  # when the platform acts, as the provider said
    impact: str  # maintenance: reboot (work is lost) or pause (work survives)
    received_at: float
    raw: str = ""
    act_at: float | None = None  # jobs still running then are requeued
    acted: bool = False  # they were
    reopen_at: float | None = None  # rebalance advice lapses then
    reopen: bool = False  # the notice closed an open host: it reopens when the notice ends


@dataclass(frozen=True)
class Host:
    key: str  # the instance id for provisioned hosts, "host:NAME" for the others
    state: HostState
    template: str
    name: str = ""  # the joined host name ("" while expected)
    instance_id: str = ""
    provider: str = ""
    provisioned: bool = False
    expected_name: str = ""
    expected_address: str = ""
    expected_at: float | None = None
    deadline: float | None = None
    token_hash: str = ""  # the per-instance join token, sealed (credentials.seal)
    incarnation: int = 0  # accepted joins of this record; each issues a new credential
    credential_hash: str = ""  # the current incarnation's host credential, sealed
    next_credential_hash: str = ""  # renewed, current once the host first presents it
    worker_hash: str = ""  # the worker's credential of this join: watch and job reports only
    past_credentials: tuple[str, ...] = ()  # earlier incarnations' credentials, sealed
    refusals: int = 0  # recorded refused attempts (stale credential, second join, ...)
    last_refusal: str = ""
    joined_at: float | None = None
    boot_id: str = ""
    addresses: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    resources: dict[str, Any] = field(default_factory=dict)
    agent_version: str = ""  # what the agent said at its last join or credential renewal
    drain: Drain | None = None
    reason: str = ""  # why it is in its current state
    history: tuple[Change, ...] = ()
    before_loss: str = ""  # the state a lost host returns to when it is heard from again

    @property
    def self_changed_at(self) -> float | None:
        """When the host itself last changed its state (a join, a return from loss): a sign
        of life as good as a heartbeat. Changes the admin or the controller made are not."""
        for change in reversed(self.history):
            if self.name and change.by == self.name:
                return change.at
        return None

    notice: HostNotice | None = None
    # The notices that ended, lapsed or ended with a reboot here (the newest few), by event id
    # and the time each announced: the same item read again (an agent restart re-reads the
    # metadata) acts no more, but an id a provider reuses for its next event (AWS "aws-spot",
    # GCE's) comes with another time still to come and is a new notice (notices._over).
    done_notices: tuple[tuple[str, float | None], ...] = ()
    power: tuple[PowerStep, ...] = ()  # the provisioner's newest steps on this machine


@dataclass(frozen=True)
class Job:
    id: int
    command: tuple[str, ...]
    slots: int
    state: JobState
    submitted_at: float
    host: str = ""  # requested host name, "" for any
    assigned: str = ""  # host key it is placed on
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    requeues: int = 0
    note: str = ""


@dataclass(frozen=True)
class Fact:
    """A durable change: `kind` names it, `data` carries its JSON-safe fields."""

    kind: str
    at: float
    by: str
    data: dict[str, Any]


@dataclass
class Cluster:
    """The whole controller state: what replaying every fact produces."""

    hosts: dict[str, Host] = field(default_factory=dict)
    jobs: dict[int, Job] = field(default_factory=dict)
    next_job: int = 1
    version: int = 0  # number of facts applied
    active: dict[str, set[int]] = field(default_factory=dict)  # host key -> active job ids
    names: dict[str, str] = field(default_factory=dict)  # joined host name -> latest key
    pending: set[int] = field(default_factory=set)  # ids of pending jobs
    killed: dict[str, set[int]] = field(default_factory=dict)  # host key -> killed job ids
    # Hosts waiting for their join (expected, overdue) by expected name and address, in the
    # order they were recorded, so a join is matched without scanning every host.
    waiting_names: dict[str, dict[str, None]] = field(default_factory=dict)
    waiting_addresses: dict[str, dict[str, None]] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # instance id -> latest key
    # While a list, every change made records how to take it back (rewind): a replica's
    # change refused as stale is undone in the entries it touched, not by reading everything.
    journal: list[tuple[Any, Any, Any]] | None = None

    def mark(self) -> tuple[int, int]:
        """Start recording changes; rewind(mark) takes back everything done since."""
        self.journal = []
        return self.version, self.next_job

    def rewind(self, mark: tuple[int, int]) -> None:
        """Undo every change recorded since mark(), newest first, and stop recording."""
        journal, self.journal = self.journal or [], None
        for where, key, old in reversed(journal):
            if isinstance(where, set):
                (where.add if old else where.discard)(key)
            elif old is _MISSING:
                where.pop(key, None)
            else:
                where[key] = old
        self.version, self.next_job = mark

    def _keep(self, where: dict[Any, Any], key: Any) -> None:
        """Record an entry before it changes (an inner set or dict copied: it is changed in
        place)."""
        assert self.journal is not None
        old = where.get(key, _MISSING)
        if isinstance(old, (set, dict)):
            old = old.copy()
        self.journal.append((where, key, old))

    def put_host(self, host: Host) -> None:
        old = self.hosts.get(host.key)
        if self.journal is not None:
            self._keep(self.hosts, host.key)
            self._keep(self.names, fold(host.name))
            self._keep(self.instances, host.instance_id)
            for h in (old, host):
                if h is not None:
                    self._keep(self.waiting_names, fold(h.expected_name))
                    self._keep(self.waiting_addresses, h.expected_address)
        if old is not None and _waiting(old):
            _unindex(self.waiting_names, fold(old.expected_name), old.key)
            _unindex(self.waiting_addresses, old.expected_address, old.key)
        self.hosts[host.key] = host
        if host.name:
            self.names[fold(host.name)] = host.key
        if _waiting(host):
            if host.expected_name:
                self.waiting_names.setdefault(fold(host.expected_name), {})[host.key] = None
            if host.expected_address:
                self.waiting_addresses.setdefault(host.expected_address, {})[host.key] = None
        if host.instance_id:
            self.instances[host.instance_id] = host.key

    def by_name(self, name: str) -> Host | None:
        """The record that last joined as `name` (any state, any case); never by key."""
        key = self.names.get(fold(name))
        return self.hosts[key] if key is not None else None

    def by_instance(self, instance_id: str) -> Host | None:
        key = self.instances.get(instance_id)
        return self.hosts[key] if key is not None else None

    def put_job(self, job: Job) -> None:
        """Store a job and keep the per-host index of active jobs current."""
        old = self.jobs.get(job.id)
        if self.journal is not None:
            self._keep(self.jobs, job.id)
            self.journal.append((self.pending, job.id, job.id in self.pending))
            for where in (self.active, self.killed):
                self._keep(where, job.assigned)
                if old is not None:
                    self._keep(where, old.assigned)
        if old is not None and old.assigned:
            was = self.active.get(old.assigned)
            if was is not None:
                was.discard(job.id)
        self.jobs[job.id] = job
        if job.assigned and (job.state is JobState.ASSIGNED or job.state is JobState.RUNNING):
            self.active.setdefault(job.assigned, set()).add(job.id)
        if job.state is JobState.PENDING:
            self.pending.add(job.id)
        else:
            self.pending.discard(job.id)
        if job.assigned and job.state is JobState.KILLED:
            self.killed.setdefault(job.assigned, set()).add(job.id)

    def host_by_name(self, name: str) -> Host | None:
        """The live host called `name` (not decommissioned or returned), else the latest."""
        key = self.names.get(fold(name))
        if key is not None and self.hosts[key].state not in TERMINAL:
            return self.hosts[key]
        # A new instance expected under a decommissioned host's name is the live one: before,
        # the old record answered for the name and the expected one could not be reached.
        for waiting in self.waiting_names.get(fold(name), {}):
            return self.hosts[waiting]
        found = [h for h in self.hosts.values() if same_name(h.name, name)]  # never a key
        if not found:
            found = [
                h for h in self.hosts.values() if not h.name and same_name(h.expected_name, name)
            ]
        live = [h for h in found if h.state not in TERMINAL]
        pool = live or found
        return max(pool, key=lambda h: h.joined_at or h.expected_at or 0.0) if pool else None

    def jobs_on(self, key: str) -> list[Job]:
        return [self.jobs[i] for i in sorted(self.active.get(key, ()))]

    def watched_jobs(self, key: str) -> list[Job]:
        """What a host's watch lists: its assigned and running jobs, and those killed there."""
        ids = self.active.get(key, set()) | self.killed.get(key, set())
        return [self.jobs[i] for i in sorted(ids) if i in self.jobs]

    def waiting_match(self, name: str, addresses: tuple[str, ...]) -> Host | None:
        """The first recorded waiting instance expected under this name, else address."""
        for key in self.waiting_names.get(fold(name), {}):
            return self.hosts[key]
        for address in addresses:
            for key in self.waiting_addresses.get(address, {}):
                return self.hosts[key]
        return None


_MISSING = object()  # a journal's "there was no entry"


def fold(name: str) -> str:
    """A host name as DNS compares it (RFC 4343): `D3` is `d3`, so a decommissioned `d3`
    cannot come back as `D3`, nor two live hosts share one name. Names are ASCII (checked at
    every door); records keep the spelling they joined with."""
    return name.lower()


def same_name(a: str, b: str) -> bool:
    return fold(a) == fold(b)


def _waiting(host: Host) -> bool:
    return host.provisioned and host.state in (HostState.EXPECTED, HostState.OVERDUE)


def _unindex(index: dict[str, dict[str, None]], value: str, key: str) -> None:
    keys = index.get(value)
    if keys is not None:
        keys.pop(key, None)
        if not keys:
            del index[value]
