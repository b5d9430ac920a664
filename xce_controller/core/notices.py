"""Providers' warnings as planned drains: pure decisions, like the rest of the lifecycle.

A host holds at most one notice, the most severe it was told of (shutdown > preemption,
termination > maintenance with reboot > maintenance with pause > rebalance); every notice
received is recorded as a fact either way.

* preemption, termination, shutdown: the host is closed to new work; jobs still running at
  `deadline - notices.margin` (at once for shutdown, or with `requeue_at_once`) are requeued.
* maintenance that reboots: the same before NotBefore; the host reopens once it is back after
  the reboot (a new boot id, on its join or on the heartbeat that renews its credential) or
  the provider withdraws the event.
* maintenance that pauses (live migration, freeze): recorded and shown; work survives it.
* rebalance: advice only; the host is closed to new work and reopens by itself after
  `notices.rebalance_reopen` unless a preemption follows.
* stop (protocol 1.3): the host's agent is stopped on purpose (`xce-agent stop`). The host is
  closed ("agent stopped (planned)"); its jobs may finish until the notice's deadline (the
  agent's drain bound), then those still running are requeued; it is drained once it runs
  nothing. It is never taken for lost while the notice holds (its agent is down on purpose,
  so no heartbeat comes), and it reopens when its agent runs again (a join, or the heartbeat
  that renews its credential), whatever the boot.

A host reopens only if the notice closed it: an admin's close is never undone. A notice that
is over for a host (withdrawn, lapsed, ended by the reboot it announced) is recorded but acts
no more when the same item is read again, as it is after every agent restart.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from xce_controller.core.codec import notice_to_json
from xce_controller.core.config import ClusterConfig
from xce_controller.core.model import JOINED, Cluster, Fact, Host, HostNotice, HostState
from xce_protocol.notices import Impact, Notice, NoticeKind, NoticeState
from xce_protocol.reasons import Reason

CONTROLLER = "controller"  # as in lifecycle, which calls this module

_SEVERITY = {
    NoticeKind.REBALANCE.value: 1,
    NoticeKind.MAINTENANCE.value: 2,
    NoticeKind.TERMINATION.value: 4,
    NoticeKind.PREEMPTION.value: 4,
    NoticeKind.SHUTDOWN.value: 5,
    NoticeKind.STOP.value: 3,
}
_GOING = (NoticeKind.PREEMPTION.value, NoticeKind.TERMINATION.value, NoticeKind.SHUTDOWN.value)


def fact(kind: str, now: float, by: str, **data: Any) -> Fact:
    """A fact; a `code` (xce_protocol.reasons) is stored as its plain string."""
    if isinstance(data.get("code"), Reason):
        data["code"] = data["code"].value
    return Fact(kind, now, by, data)


_CODES = {
    NoticeKind.PREEMPTION.value: Reason.NOTICE_PREEMPTION,
    NoticeKind.TERMINATION.value: Reason.NOTICE_TERMINATION,
    NoticeKind.MAINTENANCE.value: Reason.NOTICE_MAINTENANCE,
    NoticeKind.REBALANCE.value: Reason.NOTICE_REBALANCE,
    NoticeKind.SHUTDOWN.value: Reason.NOTICE_SHUTDOWN,
    NoticeKind.STOP.value: Reason.NOTICE_STOP,
}


def notice_code(kind: str) -> Reason:
    """The reason code of what a notice of `kind` makes happen."""
    return _CODES.get(kind, Reason.NOTICE_MAINTENANCE)


def severity(kind: str, impact: str) -> int:
    bonus = 1 if kind == NoticeKind.MAINTENANCE.value and impact == Impact.REBOOT.value else 0
    return _SEVERITY.get(kind, 0) + bonus


STOPPED = "agent stopped (planned)"


def planned_stop(host: Host) -> bool:
    """The host's agent is stopped on purpose: no heartbeat is expected, the host is not lost."""
    return host.notice is not None and host.notice.kind == NoticeKind.STOP.value


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(at))


def describe(notice: HostNotice) -> str:
    """`preemption notice (aws), platform acts at 08:22:00Z`: for reasons and listings."""
    if notice.kind == NoticeKind.STOP.value:
        drain = f", jobs drain until {_clock(notice.deadline)}" if notice.deadline else ""
        return STOPPED + drain
    text = f"{notice.kind} notice ({notice.provider or '-'})"
    if notice.deadline is not None:
        text += ", platform acts at " + _clock(notice.deadline)
    return text


def _record(now: float, host: Host, received: Notice, notice: HostNotice | None) -> Fact:
    return fact(
        "notice",
        now,
        host.name,
        key=host.key,
        received=received.to_wire(),
        notice=notice_to_json(notice),
        code=notice_code(received.kind.value)
        if received.state is NoticeState.ACTIVE
        else Reason.NOTICE_ENDED,
    )


def receive(cluster: Cluster, cfg: ClusterConfig, now: float, host: Host, n: Notice) -> list[Fact]:
    """The facts a notice from the host's agent makes: always its record, maybe more."""
    current = host.notice
    if n.state is NoticeState.ENDED:
        if current is None or current.event_id != n.event_id:
            return [_record(now, host, n, current)]  # not the one acted on: nothing changes
        return _end(now, host, n, f"{current.kind} notice withdrawn by {n.provider or 'agent'}")
    if _over(host, n, now) and (current is None or current.event_id != n.event_id):
        return [_record(now, host, n, current)]  # over already: read again after a restart
    weaker = current is not None and severity(current.kind, current.impact) >= severity(
        n.kind.value, n.impact.value
    )
    if current is not None and current.event_id != n.event_id and weaker:
        return [_record(now, host, n, current)]  # a weaker warning than the one acted on
    acting = _acting(cfg, now, host, n, current)
    facts = [_record(now, host, n, acting)]
    if _closes(acting) and host.state is HostState.OPEN:
        facts.append(
            fact(
                "state",
                now,
                host.name,
                key=host.key,
                state=HostState.CLOSED.value,
                why=describe(acting),
                code=notice_code(acting.kind),
            )
        )
    return facts


def _over(host: Host, n: Notice, now: float) -> bool:
    """The notice is one that is over here, read again: its id, and not another time still to
    come (AWS names every spot interruption alike, GCE every preemption: the next one of an
    instance stopped and started announces a new time)."""
    return any(
        event_id == n.event_id
        and (n.deadline is None or n.deadline == deadline or n.deadline <= now)
        for event_id, deadline in host.done_notices
    )


def _acting(
    cfg: ClusterConfig, now: float, host: Host, n: Notice, current: HostNotice | None
) -> HostNotice:
    settings = cfg.notices
    kind = n.kind.value
    act_at: float | None = None
    if kind in _GOING or (kind == NoticeKind.MAINTENANCE.value and n.impact is Impact.REBOOT):
        act_at = now
        if n.deadline is not None and not (settings.requeue_at_once and kind in _GOING):
            act_at = max(now, n.deadline - settings.margin)
        if kind == NoticeKind.SHUTDOWN.value:
            act_at = now
    if kind == NoticeKind.STOP.value:  # jobs may finish within the agent's drain bound
        act_at = now if n.deadline is None else max(now, n.deadline)
    same = current is not None and current.event_id == n.event_id
    reopen = current.reopen if current is not None else host.state is HostState.OPEN
    return HostNotice(
        kind=kind,
        provider=n.provider,
        event_id=n.event_id,
        deadline=n.deadline,
        impact=n.impact.value,
        received_at=current.received_at if same and current else now,
        raw=n.raw,
        act_at=act_at,
        acted=bool(same and current and current.acted),
        reopen_at=now + settings.rebalance_reopen if kind == NoticeKind.REBALANCE.value else None,
        reopen=reopen,
    )


def _closes(notice: HostNotice) -> bool:
    return notice.kind != NoticeKind.MAINTENANCE.value or notice.impact == Impact.REBOOT.value


def _end(now: float, host: Host, received: Notice, why: str) -> list[Fact]:
    assert host.notice is not None
    facts = [_record(now, host, received, None)]
    if host.notice.reopen and host.state is HostState.CLOSED:
        ended = Reason.NOTICE_ENDED
        facts.append(_reopened(now, host, host.name, why, ended))
    return facts


def after_admin_close(now: float, by: str, host: Host) -> list[Fact]:
    """An admin closed the host while a notice had it closed: the close is the admin's now, and
    the notice's end or lapse must not reopen it."""
    notice = host.notice
    if notice is None or not notice.reopen:
        return []
    kept = replace(notice, reopen=False)
    return [
        fact("notice", now, by, key=host.key, notice=notice_to_json(kept), code=Reason.ADMIN_CLOSED)
    ]


def due(cluster: Cluster, now: float, host: Host) -> list[Fact]:
    """What time makes due for a host's notice: the requeue, or rebalance advice lapsing."""
    notice = host.notice
    if notice is None or host.state not in JOINED:
        return []
    if notice.act_at is not None and not notice.acted and now >= notice.act_at:
        why = f"{describe(notice)} on {host.name}"
        facts = [
            fact(
                "job_requeued",
                now,
                CONTROLLER,
                id=j.id,
                key=host.key,
                why=why,
                code=Reason.JOB_REQUEUED_NOTICE,
            )
            for j in cluster.jobs_on(host.key)
        ]
        acted = replace(notice, acted=True)
        code = notice_code(notice.kind)
        facts.append(
            fact("notice", now, CONTROLLER, key=host.key, notice=notice_to_json(acted), code=code)
        )
        return facts
    if notice.reopen_at is not None and now >= notice.reopen_at:
        lapsed = Reason.NOTICE_LAPSED
        facts = [fact("notice", now, CONTROLLER, key=host.key, notice=None, code=lapsed)]
        if notice.reopen and host.state is HostState.CLOSED:
            why = "rebalance advice lapsed: no preemption followed"
            facts.append(_reopened(now, host, CONTROLLER, why, lapsed))
        return facts
    return []


def next_due(host: Host) -> float | None:
    notice = host.notice
    if notice is None or host.state not in JOINED:
        return None
    times = [notice.reopen_at] if notice.reopen_at is not None else []
    if notice.act_at is not None and not notice.acted:
        times.append(notice.act_at)
    return min(times) if times else None


def after_join(now: float, host: Host, boot_id_before: str) -> list[Fact]:
    """A host back from a reboot the notice announced, or whose agent runs again after its
    planned stop (same boot or not): the notice is over."""
    notice = host.notice
    if notice is None:
        return []
    if notice.kind == NoticeKind.STOP.value:
        why = "agent started again after its planned stop"
    elif not host.boot_id or host.boot_id == boot_id_before:
        return []
    else:
        why = f"rejoined after the {notice.kind} notice (new boot)"
    ended = Reason.NOTICE_ENDED
    facts = [fact("notice", now, host.name, key=host.key, notice=None, code=ended)]
    if notice.reopen and host.state is HostState.CLOSED:
        facts.append(_reopened(now, host, host.name, why, ended))
    return facts


def drained(cluster: Cluster, host: Host) -> bool:
    """The host acted on its notice and runs nothing: the platform need not wait for it (a
    planned stop's agent may stop its worker: its jobs finished before the drain's end)."""
    notice = host.notice
    return (
        notice is not None
        and host.state is not HostState.OPEN
        and (notice.act_at is None or notice.acted or notice.kind == NoticeKind.STOP.value)
        and not cluster.jobs_on(host.key)
    )


def _reopened(now: float, host: Host, by: str, why: str, code: Reason) -> Fact:
    """The fact that opens a host its notice had closed, once the notice is over."""
    return fact("state", now, by, key=host.key, state=HostState.OPEN.value, why=why, code=code)
