"""A host that never joins gives itself up: `instance.join_deadline` and `on_join_timeout`.

An instance whose agent is never accepted by the controller (a wrong token, a controller it
cannot reach, a bad image) would run and bill until someone notices. With a join deadline,
an agent that has not been accepted once by then logs why (the last refusal or failure),
tells the controller if it can, and runs the action: `poweroff` (with a cloud's "terminate
on shutdown" the instance is returned without any provisioner), `none`, or a command.

The deadline counts from the agent's first start for this instance id (kept in the state
directory, so agent restarts and reboots do not extend it). A host that joined once never
runs the action, even when it cannot reach the controller later. The decisions are a pure
machine; `JoinRecord` is what is kept on disk.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Union

from xce_agent.config.join_deadline import JoinTimeout
from xce_protocol.atomic_file import write_atomic
from xce_protocol.validation import describe

log = logging.getLogger(__name__)

RECORD_FILE = "join.json"


@dataclass(frozen=True)
class JoinRecord:
    instance_id: str
    first_start: float  # wall clock: the deadline counts from here
    joined: bool = False
    gave_up_at: float | None = None
    # The kernel's boot and its monotonic clock at first_start: within that boot they tell
    # the time since the first start, whatever the wall clock did meanwhile.
    boot_id: str = ""
    first_mono: float | None = None


@dataclass(frozen=True)
class Watch:
    deadline: float | None  # wall clock; None: no deadline configured
    joined: bool = False
    acted: bool = False


@dataclass(frozen=True)
class Accepted:
    """The controller accepted this host (a join, or a resume with its credential)."""


@dataclass(frozen=True)
class Due:
    why: str  # the last refusal or failure


Event = Union[Accepted, Due]


@dataclass(frozen=True)
class Remember:
    """Write down that this host joined: it never gives itself up after that."""


@dataclass(frozen=True)
class GiveUp:
    why: str


Action = Union[Remember, GiveUp]


def watch_of(record: JoinRecord, deadline: float | None) -> Watch:
    if deadline is None:
        return Watch(None, record.joined)
    return Watch(record.first_start + deadline, record.joined, record.gave_up_at is not None)


def next_due(watch: Watch) -> float | None:
    if watch.deadline is None or watch.joined or watch.acted:
        return None
    return watch.deadline


def step(watch: Watch, event: Event, now: float) -> tuple[Watch, tuple[Action, ...]]:
    if isinstance(event, Accepted):
        if watch.joined:
            return watch, ()
        return replace(watch, joined=True), (Remember(),)
    due = next_due(watch)
    if due is None or now < due:
        return watch, ()
    return replace(watch, acted=True), (GiveUp(event.why),)


# --- the record on disk -------------------------------------------------------------------


def load(
    directory: Path,
    instance_id: str,
    now: float,
    joined_before: bool = False,
    boot: tuple[str, float] | None = None,
) -> JoinRecord:
    """This instance's record; a fresh one (saved) for a new instance or a missing file.

    `joined_before`: the state directory holds a credential the controller issued to this
    instance (it joined before this record existed, or the record was lost): a host that
    joined once never gives itself up. `boot`: the kernel's boot id and its monotonic clock
    now. In the boot of the first start the deadline counts on the monotonic clock (a wall
    clock corrected forward since, then an agent restart, gave up at once); from an earlier
    boot only the wall clock tells, and a first start in the future (a clock stepped back
    since) counts from now, or the deadline could be put off without bound.
    """
    path = directory / RECORD_FILE
    try:
        record: JoinRecord | None = _parse(json.loads(path.read_text()))
    except FileNotFoundError:
        record = None
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        log.warning("%s unreadable (%s): the join deadline counts from now", path, exc)
        record = None
    fresh = record is None or record.instance_id != instance_id
    if record is None or record.instance_id != instance_id:
        record = JoinRecord(instance_id, now)
    first = record.first_start
    if boot is not None and boot[0] == record.boot_id != "" and record.first_mono is not None:
        first = now - max(0.0, boot[1] - record.first_mono)
    elif first > now:
        log.warning("%s: first start is in the future: the join deadline counts from now", path)
        first = now
    updated = replace(record, first_start=first, joined=record.joined or joined_before)
    if boot is not None:
        updated = replace(updated, boot_id=boot[0], first_mono=boot[1] - (now - first))
    if fresh or updated != record:
        save(directory, updated)
    return updated


def _parse(data: Any) -> JoinRecord:
    joined, gave_up = data["joined"], data.get("gave_up_at")
    boot, mono = data.get("boot_id", ""), data.get("first_mono")
    if not isinstance(joined, bool):
        raise TypeError(f"joined is {describe(joined)}, not true or false")
    if not isinstance(boot, str):
        raise TypeError(f"boot_id is {describe(boot)}, not a string")
    return JoinRecord(
        str(data["instance_id"]),
        _time(data["first_start"]),
        joined,
        None if gave_up is None else _time(gave_up),
        boot,
        None if mono is None else _time(mono),
    )


def _time(value: object) -> float:
    number = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):  # an int past a float's range
            number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"a time is {describe(value)}, not a finite number")
    return number


def save(directory: Path, record: JoinRecord) -> None:
    try:
        write_atomic(directory / RECORD_FILE, json.dumps(asdict(record)), 0o600)
    except OSError as exc:
        log.error("cannot keep the join record in %s: %s", directory, exc)


def describe_action(action: JoinTimeout) -> str:
    if action.kind == "command":
        return "running " + " ".join(action.command)
    return "powering off" if action.kind == "poweroff" else "doing nothing (on_join_timeout: none)"
