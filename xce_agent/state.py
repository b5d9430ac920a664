"""The agent's local state: versioned JSON in the state directory, written atomically.

What a restarted agent needs to re-adopt its components, what `xce-agent status` shows,
and the decommission tombstone. A corrupt file is moved aside, never trusted or fatal.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import math
import os
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from xce_agent.config.component import NAME
from xce_agent.core import pending_notices, singleton_holds
from xce_agent.core.membership import MembershipState, Standing
from xce_agent.core.pending_notices import PendingNotice
from xce_agent.core.planned_stop import Draining
from xce_agent.core.singleton_holds import SingletonHold
from xce_agent.errors import StateError, StateNotPermitted
from xce_protocol.atomic_file import write_atomic

log = logging.getLogger(__name__)

STATE_VERSION = 1
STATE_FILE = "state.json"
# What the agent (or an earlier version) keeps in its state directory; anything else means
# the directory is shared (state_directory: /var/lib, /tmp, /), which the agent must not close.
_OWN_NAMES = frozenset(
    (
        *("state.json", "template.json", "output", "control.sock", "credential", "agent.lock"),
        "credential.json",  # credential.py: the host and worker credentials of the last join
    )
)
_OWN_PREFIXES = (
    *(".state.json.", ".template.json.", "state.json.corrupt-", ".credential."),
    *("notice-", ".notice-"),  # notices/relay.py: notice-NAME.json and its temporary files
    *("join.json", ".join.json."),  # join_deadline.py: the join deadline's record
)


def _ours(name: str) -> bool:
    return name in _OWN_NAMES or name.startswith(_OWN_PREFIXES) or name == "lost+found"


@dataclass(frozen=True)
class ComponentRecord:
    name: str
    role: str
    phase: str
    pid: int | None = None
    identity: dict[str, Any] | None = None  # ProcessIdentity.to_json()
    restarts: int = 0
    last_exit: str | None = None
    reason: str = ""
    since: float = 0.0  # wall-clock time of the last phase change
    started: float = 0.0  # wall-clock start of the running process (uptime)
    next_retry: float | None = None  # wall-clock time of the next restart while in backoff
    tail: tuple[str, ...] = ()  # the last lines of its output
    note: str = ""  # e.g. "restarting: its configured command changed"
    code: str = ""  # the reason's code (xce_protocol.reasons)
    limits: str = ""  # how its limits are enforced (or that they are not)


class Lifecycle(str, enum.Enum):
    """Where the agent process is (where the host stands is `MembershipState.standing`)."""

    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"  # stopping every component, then the agent (xce-agent stop)
    STOPPED = "stopped"  # the agent exited after stopping its components
    DETACHED = "detached"  # the agent exited and left its components to the next agent


@dataclass(frozen=True)
class Tombstone:
    """The on-disk view of a DECOMMISSIONED standing: this instance's worker never runs again.

    Written into state.json beside the standing so that any agent version reading the file
    (an older one after a downgrade, too) honours it.
    """

    instance_id: str
    reason: str
    at: float


@dataclass(frozen=True)
class AgentRecord:
    pid: int
    create_time: float
    boot_id: str
    started_at: float
    config: str
    start_ticks: int = 0  # exact start time in clock ticks: the live agent is this process


@dataclass(frozen=True)
class StartIntent:
    """Written (and fsync'ed) before a component's start, replaced by its identity after:
    a process started under it whose identity never reached the disk (the agent killed in
    between) is still known to the next agent (components/prestart.py)."""

    name: str
    boot_id: str
    after_ticks: int  # clock ticks since boot before the start: the process started later
    owner: str  # the agent's state directory, as the component's environment carries it
    boot_time: float = 0.0  # btime seen with boot_id (supervision.boot.same_boot)


def _intents(data: Any) -> tuple[StartIntent, ...]:
    found = []
    for item in data if isinstance(data, list) else ():
        try:
            intent = StartIntent(**item)
        except TypeError:
            continue
        texts = all(isinstance(x, str) for x in (intent.name, intent.boot_id, intent.owner))
        btime = intent.boot_time
        btime_ok = isinstance(btime, (int, float)) and 0.0 <= float(btime) < 1e11  # not NaN
        ticks_ok = isinstance(intent.after_ticks, int)
        if texts and btime_ok and ticks_ok and NAME.fullmatch(intent.name):
            found.append(intent)
    return tuple(found)


@dataclass(frozen=True)
class AgentState:
    lifecycle: Lifecycle = Lifecycle.STARTING
    instance_id: str = ""
    roles: tuple[str, ...] = ()
    agent: AgentRecord | None = None
    components: tuple[ComponentRecord, ...] = ()
    membership: MembershipState = field(default_factory=MembershipState)
    updated_at: float = 0.0
    containment: str = ""  # how components are contained: a cgroup, or process groups and why
    cgroup_root: str = ""  # the agent's delegated cgroup, when it has one
    notices: tuple[PendingNotice, ...] = ()  # the provider's notices pending (status shows them)
    singletons: tuple[SingletonHold, ...] = ()  # each singleton's lease hold (status shows them)
    starting: tuple[StartIntent, ...] = ()  # starts begun whose identity is not saved yet
    planned_stop: Draining | None = None  # a planned stop's drain under way (status shows it)

    def component(self, name: str) -> ComponentRecord | None:
        return next((c for c in self.components if c.name == name), None)

    @property
    def tombstone(self) -> Tombstone | None:
        m = self.membership
        return Tombstone(m.instance_id, m.detail, m.since) if m.decommissioned else None

    def to_json(self) -> dict[str, Any]:
        m = self.membership
        tomb = self.tombstone
        return {
            "version": STATE_VERSION,
            "lifecycle": self.lifecycle.value,
            "instance_id": self.instance_id,
            "roles": list(self.roles),
            "agent": asdict(self.agent) if self.agent else None,
            "components": [_component_json(c) for c in self.components],
            # Beside the records, not in them: an older agent reading this file (a downgrade)
            # would take an unknown field in a record for a corrupt state.
            "codes": {c.name: c.code for c in self.components if c.code},
            "limits": {c.name: c.limits for c in self.components if c.limits},
            "controller": {
                "state": m.standing.value,
                "since": m.since,
                "host": m.host,
                "detail": m.detail,
                "instance_id": m.instance_id,
                "retry_until": m.retry_until,
                "reported": m.reported,
                "link_warning": m.link_warning,
            },
            "tombstone": asdict(tomb) if tomb else None,
            "updated_at": self.updated_at,
            "containment": self.containment,
            "cgroup_root": self.cgroup_root,
            "notices": [n.to_json() for n in self.notices],
            "singletons": [h.to_json() for h in self.singletons],
            "starting": [asdict(i) for i in self.starting],
            "planned_stop": self.planned_stop.to_json() if self.planned_stop else None,
        }

    @classmethod
    def from_json(cls, data: Any) -> AgentState:
        """Rebuild from JSON; ValueError for anything that is not a state of our version."""
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise ValueError(f"expected a state of version {STATE_VERSION}")
        try:
            agent = _agent(data["agent"]) if data.get("agent") else None
            tomb = Tombstone(**data["tombstone"]) if data.get("tombstone") else None
            codes, limits = data.get("codes") or {}, data.get("limits") or {}
            comps = tuple(
                replace(
                    _component(c),
                    code=str(codes.get(c.get("name"), "")),
                    limits=str(limits.get(c.get("name"), "")),
                )
                for c in data.get("components", [])
                if _named(c)
            )
            return cls(
                lifecycle=_lifecycle(data["lifecycle"]),
                instance_id=str(data.get("instance_id", "")),
                roles=tuple(data.get("roles", ())),
                agent=agent,
                components=comps,
                membership=_membership(data.get("controller") or {}, tomb),
                updated_at=float(data.get("updated_at", 0.0)),
                containment=str(data.get("containment", "")),
                cgroup_root=str(data.get("cgroup_root", "")),
                notices=pending_notices.from_json(data.get("notices")),
                singletons=singleton_holds.from_json(data.get("singletons")),
                starting=_intents(data.get("starting")),
                planned_stop=Draining.from_json(data.get("planned_stop")),
            )
        except (KeyError, TypeError, OverflowError) as exc:  # Overflow: a number past a float
            raise ValueError(f"malformed state: {exc}") from None


def _component_json(record: ComponentRecord) -> dict[str, Any]:
    data = asdict(record)
    data.pop("code")
    data.pop("limits")
    return data


def _lifecycle(value: Any) -> Lifecycle:
    try:
        return Lifecycle(value)
    except ValueError:  # e.g. "decommissioned", written by an agent before 0.2
        return Lifecycle.STOPPED


def _membership(contact: dict[str, Any], tomb: Tombstone | None) -> MembershipState:
    """The saved standing; a tombstone always wins, whatever else the file says."""
    if tomb is not None:
        return MembershipState(
            Standing.DECOMMISSIONED,
            since=float(tomb.at),
            host=str(contact.get("host", "")),
            detail=str(tomb.reason),
            instance_id=str(tomb.instance_id),
            reported=bool(contact.get("reported", True)),
        )
    try:
        standing = Standing(contact.get("state", Standing.WAITING.value))
    except ValueError:
        standing = Standing.WAITING
    if standing is Standing.DECOMMISSIONED:  # only the tombstone says that
        standing = Standing.WAITING
    return MembershipState(
        standing,
        since=float(contact.get("since", 0.0)),
        host=str(contact.get("host", "")),
        detail=str(contact.get("detail", "")),
        instance_id=str(contact.get("instance_id", "")),
    )


def _named(data: Any) -> bool:
    """A record names a component only by a valid component name: the name becomes cgroup,
    scope and file paths, and `a/../../b` would lead out of the agent's own."""
    name = data.get("name") if isinstance(data, dict) else None
    if isinstance(name, str) and NAME.fullmatch(name):
        return True
    log.warning("state: ignored a component record with an invalid name %.80r", name)
    return False


def _agent(data: Any) -> AgentRecord | None:
    """The recorded agent, or None when a field is not what it must be: a start time no
    float holds, or a string, failed every later start in the live-agent check. Without it
    the lock and the directory's socket (system/single_agent.py) still refuse a second agent."""
    record = AgentRecord(**data)
    ints = (record.pid, record.start_ticks)
    typed = all(isinstance(v, int) and not isinstance(v, bool) for v in ints)
    typed = typed and isinstance(record.boot_id, str) and isinstance(record.config, str)
    if typed and all(_finite(v) for v in (*ints, record.create_time, record.started_at)):
        return record
    log.warning("state: ignored a malformed record of the agent %.120r", data)
    return None


def _finite(value: Any) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _component(data: Any) -> ComponentRecord:
    record = ComponentRecord(**data)
    return replace(record, tail=tuple(str(line) for line in record.tail or ()))


class StateStore:
    """Reads and atomically replaces `state.json` in one directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / STATE_FILE
        self._stamp: tuple[int, int, int] | None = None  # the file this store wrote last
        self._lock = threading.Lock()  # a write and its stamp are one step for changed_under

    def ensure_directory(self) -> None:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            msg = f"{self.directory}: cannot create state directory: {exc.strerror}"
            raise StateError(msg) from None
        foreign = sorted(name for name in os.listdir(self.directory) if not _ours(name))
        if foreign:
            # The agent takes the directory's owner and mode (0700 root): never a shared one.
            shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
            raise StateError(
                f"{self.directory}: not a state directory of the agent's own (it holds {shown});"
                " point state_directory at a directory for the agent alone"
            )

    def clean_temp_files(self) -> int:
        """Remove `.state.json.*` left by a writer that died mid-write; how many."""
        removed = 0
        try:
            names = os.listdir(self.directory)
        except OSError:
            return 0
        for name in names:
            if name.startswith(f".{STATE_FILE}."):
                with contextlib.suppress(OSError):
                    os.unlink(self.directory / name)
                    removed += 1
        return removed

    def load(self) -> AgentState | None:
        """The saved state; None if there is none or it was corrupt (then moved aside)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StateError(f"{self.path}: cannot read: {exc.strerror}") from None
        try:
            return AgentState.from_json(json.loads(raw.decode("utf-8")))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # deep: not ours
            aside = self.path.with_name(f"{STATE_FILE}.corrupt-{int(time.time())}")
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
            log.error("%s: corrupt state moved aside to %s (%s)", self.path, aside.name, exc)
            return None

    def read_only(self) -> AgentState | None:
        """Like load, but never moves a file (for `status`, which may not own the state)."""
        try:
            return AgentState.from_json(json.loads(self.path.read_bytes().decode("utf-8")))
        except FileNotFoundError:
            return None
        except PermissionError as exc:  # `status` says it needs root, when not root
            raise StateNotPermitted(f"{self.path}: unreadable state: {exc.strerror}") from None
        except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise StateError(f"{self.path}: unreadable state: {exc}") from None

    def save(self, state: AgentState) -> None:
        with self._lock:
            write_atomic(self.path, json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n")
            with contextlib.suppress(OSError):
                self._stamp = _stamp(os.stat(self.path))

    def changed_under(self) -> str:
        """Why the file is no longer the one this store wrote last ("" while it is): removed,
        edited or replaced (an older copy put back). The agent writes its state again then,
        since the next agent adopts only what the file names."""
        if not self._lock.acquire(blocking=False):
            return ""  # a write is under way (the event loop never waits on its fsync)
        try:
            if self._stamp is None:
                return ""
            now = _stamp(os.stat(self.path))
        except FileNotFoundError:
            return "removed"
        except OSError:
            return ""
        finally:
            self._lock.release()
        return "" if now == self._stamp else "edited or replaced"


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class StateWriter:
    """Writes the latest submitted state on a thread, so the event loop never waits on fsync.

    Submissions coalesce: a burst of changes costs one write. `flush` waits until the newest
    submission is on disk (the agent calls it before it exits).
    """

    def __init__(self, store: StateStore) -> None:
        import threading

        self.store = store
        self._cond = threading.Condition()
        self._pending: AgentState | None = None
        self._submitted = 0
        self._written = 0
        self._failed: tuple[int, str] = (0, "")  # the last submission a failed write covered
        self.last_error = ""  # why the last write failed; "" once one succeeded
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="state-writer", daemon=True)
        self._thread.start()

    def submit(self, state: AgentState) -> None:
        with self._cond:
            self._pending = state
            self._submitted += 1
            self._cond.notify_all()

    def flush(self, timeout: float = 10.0) -> None:
        with self._cond:
            target = self._submitted
            self._cond.wait_for(lambda: self._written >= target, timeout)

    def save_now(self, state: AgentState, timeout: float = 10.0) -> str:
        """Submit `state` and wait until a write covering it ended; "" once it is on disk
        (fsync'ed), else why not (the write-ahead of a component's start, prestart.py)."""
        with self._cond:
            self._pending = state
            self._submitted += 1
            target = self._submitted
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self._written >= target, timeout):
                return f"saving the state took over {timeout:g}s"
            number, why = self._failed
            return why if number >= target else ""

    def close(self) -> None:
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                state, self._pending = self._pending, None
                number = self._submitted
            why = ""
            try:
                self.store.save(state)
            except OSError as exc:
                why = f"cannot save state to {self.store.path}: {exc.strerror or exc}"
                log.error("%s", why)
            with self._cond:
                self.last_error = why
                if why:
                    self._failed = (number, why)
                self._written = max(self._written, number)
                self._cond.notify_all()
