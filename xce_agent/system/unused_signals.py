"""The signals the agent has no use for: logged and ignored, never fatal.

A stray `kill -USR1` (or SIGALRM, SIGPWR, a real-time signal, ...) must not take
supervision down. They are handled, not set to SIG_IGN, so that components, which inherit
ignored dispositions across exec, still start with the defaults. (Python itself ignores
SIGPIPE and SIGXFSZ, and restores them for children.) SIGABRT keeps its default: it is
systemd's watchdog signal. So do SIGSEGV, SIGBUS, SIGFPE and SIGILL: handling a real fault
would return to the faulting instruction forever.
"""

from __future__ import annotations

import logging
import signal

log = logging.getLogger("xce_agent.agent")

UNUSED_SIGNALS = tuple(
    getattr(signal, name)
    for name in (
        "SIGUSR1",
        "SIGALRM",
        "SIGVTALRM",
        "SIGPROF",
        "SIGIO",
        "SIGPWR",
        "SIGSTKFLT",
        "SIGXCPU",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGQUIT",
        "SIGSYS",
        "SIGTRAP",
    )
    if hasattr(signal, name)
) + tuple(range(signal.SIGRTMIN, signal.SIGRTMAX + 1))


def name(signum: int) -> str:
    """SIGHUP, ..., or "signal 40" for a real-time signal the enum does not name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def ignore(signum: int) -> None:
    log.warning("%s ignored: the agent does not use it", name(signum))
