"""The agent's own timers on its event loop: systemd's watchdog, a periodic check, a save
deferred to the end of a burst. None of them runs for an agent that needs none: an idle
agent sleeps untimed (tests/integration/test_idle_wakeups.py)."""

from __future__ import annotations

from collections.abc import Callable

from xce_agent.supervision.reactor import Reactor
from xce_agent.system.notify import Notifier, watchdog_interval


def start_watchdog(reactor: Reactor, notifier: Notifier) -> None:
    """Ping systemd's watchdog at the interval it asks for (WATCHDOG_USEC), if it does."""
    interval = watchdog_interval()
    if interval is None:
        return

    def ping() -> None:
        notifier.notify("WATCHDOG=1")
        reactor.call_later(interval, ping)

    ping()


def every(reactor: Reactor, period: float, job: Callable[[], None]) -> None:
    """Run `job` now and then every `period` seconds."""
    job()
    reactor.call_later(period, lambda: every(reactor, period, job))


class Later:
    """Run `job` `delay` seconds after the first call of a burst: once per burst, not per
    call (the last lines of a component's output are saved so, not on every line)."""

    def __init__(self, reactor: Reactor, delay: float, job: Callable[[], None]) -> None:
        self._reactor = reactor
        self._delay = delay
        self._job = job
        self._pending = False

    def __call__(self, name: str) -> None:
        if self._pending:
            return
        self._pending = True
        self._reactor.call_later(self._delay, self._run)

    def _run(self) -> None:
        self._pending = False
        self._job()
