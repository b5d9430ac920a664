"""The last things the link says: the final report once the worker is stopped for good, and
the shutdown notice with its final report when the system shuts down.

Each runs once on its own thread, bounded by the client's timeouts, so neither a slow
controller nor an unreachable one holds up the agent's stop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from xce_agent.core import membership as ms
from xce_protocol.protocol import Answer, Outcome

log = logging.getLogger("xce_agent.controller.link")


class Reporter(Protocol):
    def heartbeat(self, payload: dict[str, Any], timeout: float | None = None) -> Answer: ...
    def notice(self, payload: dict[str, Any], timeout: float | None = None) -> Answer: ...


def final_report(
    client: Reporter, payload: Callable[[], dict[str, Any]], then: Callable[[], None]
) -> None:
    """Tell the controller once that the worker is stopped, then `then` (fall silent)."""

    def report() -> None:
        try:
            client.heartbeat(payload())
        except Exception:
            log.exception("final report to the controller failed")
        then()

    threading.Thread(target=report, name="controller-final-report", daemon=True).start()


def announce_shutdown(
    client: Reporter,
    notice_payload: dict[str, Any],
    payload: Callable[[], dict[str, Any]],
    budget: float,
    clock: Callable[[], float],
    post: Callable[[ms.Event], None],
) -> None:
    """Send the shutdown notice and the final report, each within `budget` seconds, then
    post ShutdownAnnounced: the components are stopped only after that."""

    def announce() -> None:
        started = clock()
        outcome, reported = "not sent", False
        try:
            said = client.notice(notice_payload, budget)
            outcome = said.outcome.value
            if said.outcome is not Outcome.RETRY:  # unreachable: do not wait twice
                client.heartbeat(payload(), budget)
                reported = True
        except Exception:
            log.exception("shutdown notice to the controller failed")
        log.info(
            "shutdown announced in %.3fs: notice %s, %s",
            clock() - started,
            outcome,
            "final report sent" if reported else "no final report",
        )
        post(ms.ShutdownAnnounced())

    threading.Thread(target=announce, name="controller-shutdown", daemon=True).start()
