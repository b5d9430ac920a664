"""How each part of a saved state is read back. The file may come from another version, a
bad edit or a hostile hand: a record that is not what it must be is left out (and logged),
never trusted, and a tombstone always wins over whatever else the file says."""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Any

from xce_agent.config.component import NAME
from xce_agent.core.membership import MembershipState, Standing
from xce_agent.state.records import AgentRecord, ComponentRecord, Lifecycle, StartIntent, Tombstone

log = logging.getLogger("xce_agent.state")  # the name these lines had in the journal


def intents(data: Any) -> tuple[StartIntent, ...]:
    """The start intents that name a component and hold what the next start checks."""
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


def lifecycle(value: Any) -> Lifecycle:
    """The saved lifecycle; one this version does not know is taken for stopped."""
    try:
        return Lifecycle(value)
    except ValueError:  # e.g. "decommissioned", written by an agent before 0.2
        return Lifecycle.STOPPED


def membership(contact: dict[str, Any], tomb: Tombstone | None) -> MembershipState:
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


def named(data: Any) -> bool:
    """A record names a component only by a valid component name: the name becomes cgroup,
    scope and file paths, and `a/../../b` would lead out of the agent's own."""
    name = data.get("name") if isinstance(data, dict) else None
    if isinstance(name, str) and NAME.fullmatch(name):
        return True
    log.warning("state: ignored a component record with an invalid name %.80r", name)
    return False


def agent_record(data: Any) -> AgentRecord | None:
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


def component(data: Any) -> ComponentRecord:
    """A component's record, its output tail as lines of text."""
    record = ComponentRecord(**data)
    return replace(record, tail=tuple(str(line) for line in record.tail or ()))
