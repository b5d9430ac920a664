"""The agent's signals while it starts: held from the first line of `xce-agent run`, never fatal.

Until the event loop installs its handlers (agent.py), the default dispositions apply, and
those of SIGHUP, SIGUSR1 and SIGUSR2 end a process: a `systemctl reload` or a stray
`kill -USR1` sent while the agent contains itself, records itself or opens its control
socket would kill it, leaving its components unsupervised. So `run` holds them first thing:
a handler that only notes the signal (handled, not blocked or set to SIG_IGN, so that no
thread, child or component inherits a mask or an ignored disposition). Once the loop's
handlers are in place, what was noted is handed to them: a SIGHUP becomes one reload, run
by the loop as soon as it runs (the config may have changed while the agent started); a
SIGUSR2 the stop it asks for; an unused signal the log line it always gets.

What remains is the interpreter's own start, before `run`'s first line (tens of
milliseconds); systemd queues a reload job behind the start job, so only a stray signal can
land there.

`XCE_AGENT_START_GATE` (tests only): the path of a FIFO the agent opens and reads to its end
just before the loop's handlers are installed, so that a test can hold the start at its
latest unguarded point and signal it there.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

from xce_agent.system import unused_signals

GATE_ENV = "XCE_AGENT_START_GATE"
HELD_SIGNALS = (signal.SIGHUP, signal.SIGUSR2, *unused_signals.UNUSED_SIGNALS)


class Held:
    """The signals that arrived while the agent started, in order, each once."""

    def __init__(self) -> None:
        self.pending: list[int] = []

    def note(self, signum: int, frame: FrameType | None) -> None:
        # Standard signals coalesce in the kernel too: one pending reload is one reload.
        if signum not in self.pending:
            self.pending.append(signum)

    def take(self) -> list[int]:
        """What arrived so far, once."""
        taken, self.pending = self.pending, []
        return taken


def hold() -> Held:
    """Note SIGHUP, SIGUSR2 and the unused signals from now on instead of dying of them."""
    held = Held()
    for signum in HELD_SIGNALS:
        signal.signal(signum, held.note)
    return held


def pass_gate() -> None:
    """Wait at the start's gate when a test set one (GATE_ENV); else return at once."""
    path = os.environ.get(GATE_ENV)
    if not path:
        return
    with open(path, "rb") as gate:  # blocks until the test opens it for writing
        while gate.read(4096):
            pass
