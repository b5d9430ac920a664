"""The singletons' part of the agent's metrics: each lease's hold on this host and what the
hold went through (holds begun, renewals that failed, holds lost and why).

`count` folds one step of a lease holder machine (xce_agent/core/lease_holder.py) into counters the
holder's state does not keep; `render` adds the families to the textfile's text. Pure: the
singletons call `count` after each step and hand the samples to the agent's metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from xce_agent.core import lease_holder as lh
from xce_protocol.reasons import Reason

LOSSES = (Reason.LEASE_NOT_RENEWED.value, Reason.LEASE_LOST.value)  # a hold ended, unasked


@dataclass(frozen=True)
class LeaseCounts:
    holds: int = 0  # holds begun (the component may run)
    renew_failures: int = 0  # renewals (sent while holding) with no usable answer
    losses: tuple[tuple[str, int], ...] = ()  # holds ended without a release, by code


def count(
    counts: LeaseCounts, before: lh.HolderState, event: lh.Event, after: lh.HolderState
) -> LeaseCounts:
    holding = lh.Phase.HOLDING
    if before.phase is not holding and after.phase is holding:
        counts = replace(counts, holds=counts.holds + 1)
    # A renewal that failed, even if the hold ended before its answer came (it timed out at
    # the deadline, say).
    answered = isinstance(event, lh.Failed) and event.sent_at == before.asking
    if answered and before.renewing:
        counts = replace(counts, renew_failures=counts.renew_failures + 1)
    if before.phase is holding and after.phase is lh.Phase.SEEKING and after.code in LOSSES:
        losses = dict(counts.losses)
        losses[after.code] = losses.get(after.code, 0) + 1
        counts = replace(counts, losses=tuple(sorted(losses.items())))
    return counts


@dataclass(frozen=True)
class SingletonSample:
    component: str
    lease: str
    phase: str
    code: str
    token: int
    counts: LeaseCounts


Family = Callable[[str, str, str, list[tuple[str, float]]], None]
Labels = Callable[..., str]


def render(samples: tuple[SingletonSample, ...], family: Family, labels: Labels) -> None:
    """The singleton families, through the textfile's `family` and `labels` writers."""
    if not samples:
        return
    rows = [(s, labels(component=s.component, lease=s.lease)) for s in samples]
    family(
        "xce_agent_singleton_holding",
        "gauge",
        "1 while this host holds the singleton's lease (the component may run).",
        [(lbl, int(s.phase == lh.Phase.HOLDING.value)) for s, lbl in rows],
    )
    family(
        "xce_agent_singleton_state",
        "gauge",
        "1 for the lease hold's phase and the reason code of its last change.",
        [
            (labels(component=s.component, lease=s.lease, phase=s.phase, code=s.code), 1)
            for s, _ in rows
        ],
    )
    family(
        "xce_agent_singleton_token",
        "gauge",
        "The fencing token of the latest grant this host received (0: none).",
        [(lbl, s.token) for s, lbl in rows],
    )
    family(
        "xce_agent_lease_holds",
        "counter",
        "Holds of the lease begun on this host.",
        [(lbl, s.counts.holds) for s, lbl in rows],
    )
    family(
        "xce_agent_lease_renew_failures",
        "counter",
        "Renewals of a held lease that got no usable answer (retried until the hold ends).",
        [(lbl, s.counts.renew_failures) for s, lbl in rows],
    )
    lost: list[tuple[str, float]] = []
    for s, _ in rows:
        by_code = dict(s.counts.losses)
        lost += [
            (labels(component=s.component, lease=s.lease, code=code), by_code.get(code, 0))
            for code in LOSSES
        ]
    family(
        "xce_agent_lease_losses",
        "counter",
        "Holds that ended without a release, by reason code: the singleton was stopped.",
        lost,
    )
