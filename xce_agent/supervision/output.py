"""Components' output: a named pipe per component, read in bounded bites and rate limited.

A component that floods (`yes`) or writes without newlines must cost the agent bounded
memory and CPU and never delay another component's exit handling: each wake-up reads at
most one pipe buffer, lines are cut at MAX_LINE bytes, and a token bucket lets RATE lines a
second (bursts of BURST) into the log; the rest is counted and reported as "suppressed N
lines". While a component is over its rate the agent stops reading its pipe for PAUSE
seconds, so a flood is slowed by the pipe itself instead of burning the agent's CPU.

Both the agent and the child hold the pipe open read-write: the child never gets EPIPE
while the agent restarts, and the next agent reads on from where the previous one stopped.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

READ_BUDGET = 64 * 1024
MAX_LINE = 4096
RATE = 200.0
BURST = 1000.0
PAUSE = 0.2
TAIL = 10


@dataclass(frozen=True)
class Batch:
    lines: tuple[str, ...]
    throttled: bool  # over the rate: the caller pauses reading for PAUSE seconds


class OutputPipe:
    """The named pipe a component writes its stdout and stderr into."""

    def __init__(
        self,
        path: Path,
        rate: float = RATE,
        burst: float = BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        if path.exists() and not stat.S_ISFIFO(path.lstat().st_mode):
            path.unlink()
        if not path.exists():
            os.mkfifo(path, 0o600)
        # Read-write keeps the pipe open with no writer, so reads never hit EOF.
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        self._partial = b""
        self._skipping = False  # inside a line already cut at MAX_LINE
        self._rate = rate
        self._burst = burst
        self._tokens = burst
        self._clock = clock
        self._refilled = clock()
        self.suppressed = 0
        self.suppressed_total = 0
        self.tail: deque[str] = deque(maxlen=TAIL)

    def child_fd(self) -> int:
        return os.open(self.path, os.O_RDWR | os.O_CLOEXEC)

    def read(self, budget: int = READ_BUDGET) -> Batch:
        """What one wake-up may take: at most `budget` bytes from the pipe."""
        try:
            data = os.read(self.fd, budget)
        except (BlockingIOError, InterruptedError):
            data = b""
        except OSError:
            data = b""
        return self.feed(data)

    def feed(self, data: bytes) -> Batch:
        self._refill()
        out: list[str] = []
        if self._tokens < 1 and not self._skipping:
            # Over the rate: count whole lines without splitting them.
            count = data.count(b"\n")
            if count:
                self.suppressed += count
                self._partial = data[data.rfind(b"\n") + 1 :][-MAX_LINE:]
            else:
                self._partial = (self._partial + data)[-MAX_LINE:]
            return Batch((), True)
        buffer = self._partial + data
        *lines, self._partial = buffer.split(b"\n")
        if self._skipping and not lines:
            # Inside a cut line: the discarded bytes cost like lines, or output without
            # newlines would be read at full speed forever.
            self._tokens = max(0.0, self._tokens - len(data) / MAX_LINE)
        for raw in lines:
            if self._skipping:
                self._skipping = False
                continue
            self._emit(raw, out)
        if len(self._partial) > MAX_LINE and not self._skipping:
            self._emit(self._partial[:MAX_LINE] + b" [line cut]", out)
            self._skipping = True
        if self._skipping:
            self._partial = b""
        return Batch(tuple(out), self._tokens < 1)

    def _emit(self, raw: bytes, out: list[str]) -> None:
        if self._tokens < 1:
            self.suppressed += 1
            return
        if self.suppressed:
            out.append(f"[suppressed {self.suppressed} lines: over {self._rate:g} lines/s]")
            self.suppressed_total += self.suppressed
            self.suppressed = 0
        self._tokens -= 1
        if len(raw) > MAX_LINE:
            raw = raw[:MAX_LINE] + b" [line cut]"
        line = _CONTROL.sub(_escape, raw.decode("utf-8", "replace").rstrip("\r"))
        self.tail.append(line)
        out.append(line)

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._refilled) * self._rate)
        self._refilled = now

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


# C0 controls but tab, DEL and C1 controls: a component's output reaches root's terminal
# through `status` and the journal, where these would move the cursor, clear the screen,
# set the window title or write the clipboard. They are shown as \xNN instead.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"
