"""The cluster config's `notices:` section: how the controller acts on providers' warnings."""

from __future__ import annotations

from dataclasses import dataclass

from xce_protocol.validation import Checker, describe, join_path
from xce_protocol.yamlsource import LineDict


@dataclass(frozen=True)
class NoticeSettings:
    # Jobs still running this long before the platform acts are requeued then: long enough
    # for the requeue to reach the worker and the job to be stopped before the host goes.
    margin: float = 10.0
    # Requeue a preempted or terminated host's jobs as soon as the notice arrives, for
    # clusters whose jobs rarely finish within a notice's lead time (two minutes on AWS).
    requeue_at_once: bool = False
    # A host closed on rebalance advice reopens by itself when no preemption follows.
    rebalance_reopen: float = 600.0


def parse_notice_settings(doc: LineDict, c: Checker) -> NoticeSettings | None:
    node = c.mapping(doc, "notices", "", required=False)
    if node is None:
        return NoticeSettings() if "notices" not in doc else None
    p = "notices"
    c.allowed_keys(node, p, ("margin", "requeue_at_once", "rebalance_reopen"))
    margin = c.duration(node, "margin", p, default=10.0)
    at_once = node.get("requeue_at_once", False)
    if not isinstance(at_once, bool):
        c.report(
            join_path(p, "requeue_at_once"),
            "true or false",
            describe(at_once),
            c.line_of(node, "requeue_at_once"),
        )
    reopen = c.duration(node, "rebalance_reopen", p, default=600.0, positive=True)
    if margin is None or reopen is None or not isinstance(at_once, bool):
        return None
    return NoticeSettings(margin, at_once, reopen)
