"""A worker that gave up on its host (a crash loop, FATAL): pure decisions on a heartbeat.

The host takes no new jobs (closed) as soon as its agent reports a worker-role component
FATAL. With `on_worker_fatal: replace` it is also drained with the usual policy and so ends
decommissioned, on the to-return list with the crash as its reason: the provisioner gets a
new instance for it. With `close` it stays closed until the worker runs again (an operator
restarted or reset it), and is then opened again; a host an admin closed is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from xce_controller.core import lifecycle as lc
from xce_controller.core.config import ClusterConfig
from xce_controller.core.model import AdminAction, Cluster, Fact, Host, HostState
from xce_protocol.reasons import Reason

WORKER_FATAL = "worker crash loop"  # the reason a host closed here starts with this


def _workers(components: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [c for c in components if c.get("role") == "worker"]


def on_report(
    cluster: Cluster, cfg: ClusterConfig, now: float, host: Host, report: Mapping[str, Any]
) -> list[Fact]:
    """The facts a heartbeat's component report makes due for `host`."""
    workers = _workers(report.get("components") or ())
    fatal = [c for c in workers if c.get("state") == "fatal"]
    ours = _closed_here(host)
    if fatal:
        if host.state is not HostState.OPEN and not (ours and cfg.on_worker_fatal == "replace"):
            return []  # already closed for it, draining, or closed by an admin
        c = fatal[0]
        why = f"{WORKER_FATAL}: {c.get('name')} gave up ({c.get('last_exit') or 'fatal'})"
        facts = []
        if host.state is HostState.OPEN:
            closed = Reason.WORKER_FATAL_CLOSED
            facts.append(
                lc.fact(
                    "state", now, lc.CONTROLLER, key=host.key, state="closed", why=why, code=closed
                )
            )
        if cfg.on_worker_fatal == "replace":
            decommission = AdminAction.DECOMMISSION
            drain = lc.control(cluster, cfg, now, lc.CONTROLLER, host, decommission, why=why)
            facts += [_recoded(f, Reason.WORKER_FATAL_REPLACED) for f in drain]
        return facts
    if ours and workers and all(c.get("state") == "running" for c in workers):
        names = ", ".join(str(c.get("name")) for c in workers)
        why = f"worker recovered: {names} running again"
        opened = Reason.WORKER_RECOVERED
        return [
            lc.fact("state", now, lc.CONTROLLER, key=host.key, state="open", why=why, code=opened)
        ]
    return []


def _closed_here(host: Host) -> bool:
    """Whether the close in force is this module's, by its reason code: an admin's reason is
    free text, and a loss and the return from it in between leave the close as it was (its
    reason then says "heartbeat resumed")."""
    if host.state is not HostState.CLOSED:
        return False
    for change in reversed(host.history):
        if change.code not in (Reason.HEARTBEAT_LOST, Reason.HEARTBEAT_RESUMED):
            return change.code == Reason.WORKER_FATAL_CLOSED
    return False


def _recoded(fact: Fact, code: Reason) -> Fact:
    """The drain a crash loop starts says why it started (the usual policy otherwise)."""
    if fact.kind != "drain":
        return fact
    return Fact(fact.kind, fact.at, fact.by, {**fact.data, "code": code.value})
