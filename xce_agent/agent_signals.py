"""The agent's signal handlers, installed on its event loop once it has started.

SIGTERM and SIGINT end the agent and leave its components running (a restart adopts them),
unless the whole system is shutting down: then the controller is told first and the
components stop too. SIGUSR2 stops every component and then the agent at once, as
`xce-agent stop --no-drain`. SIGHUP reloads the config; a failed reload never ends the
agent. Every unused signal is logged and ignored (system/unused_signals.py). Those that
arrived while the agent started, before these handlers, were held (system/start_signals.py)
and are handed to them here.
"""

from __future__ import annotations

import logging
import signal
from typing import Protocol

from xce_agent.operator.verbs import Operator
from xce_agent.supervision.reactor import Reactor
from xce_agent.system import start_signals, unused_signals

log = logging.getLogger("xce_agent.agent")


class SignalSide(Protocol):
    """What the handlers need of the agent."""

    reactor: Reactor
    operator: Operator

    def system_going_down(self) -> bool: ...

    def begin_shutdown(self) -> None: ...

    def detach(self, why: str) -> None: ...

    def request_stop(self, reason: str, drain: float | None = None) -> None: ...


class AgentSignals:
    def __init__(self, side: SignalSide, held: start_signals.Held | None) -> None:
        self._side = side
        self._held = held
        self._announcing = False  # telling the controller the system is going down

    def install(self) -> None:
        reactor = self._side.reactor
        for signum in unused_signals.UNUSED_SIGNALS:
            reactor.add_signal_handler(signum, unused_signals.ignore)
        reactor.add_signal_handler(signal.SIGTERM, self._on_term)
        reactor.add_signal_handler(signal.SIGINT, self._on_term)
        reactor.add_signal_handler(signal.SIGUSR2, self._on_stop_request)
        reactor.add_signal_handler(signal.SIGHUP, self._on_hup)
        for signum in self._held.take() if self._held else ():
            # Arrived while starting: acted on once the loop runs, like one that comes now.
            log.info("%s arrived while starting: acting on it now", unused_signals.name(signum))
            reactor.deliver(signum)

    def _on_term(self, signum: int) -> None:
        if self._announcing:
            return  # already telling the controller; the components stop next
        if self._side.system_going_down():
            log.info("system is shutting down: telling the controller, then stopping components")
            self._announcing = True
            self._side.begin_shutdown()
        else:
            self._side.detach(f"{signal.Signals(signum).name}: exiting; components keep running")

    def _on_stop_request(self, signum: int) -> None:
        # SIGUSR2 stops at once, as `xce-agent stop --no-drain`: the CLI's planned stop, which
        # drains first, comes over the control socket.
        self._side.request_stop("SIGUSR2", drain=0.0)

    def _on_hup(self, signum: int) -> None:
        try:
            answer = self._side.operator.handle("reload", "")
        except Exception:  # as on the control socket: a reload's failure never ends the agent
            log.exception("SIGHUP: reload failed; the config in use stays")
            return
        if not answer.ok:  # a reload that happened is logged by the reload itself
            log.error("SIGHUP: %s", answer.message)
