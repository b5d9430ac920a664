"""Runs the join deadline's action (`systemctl poweroff` or the configured command), bounded.

The command runs in its own process group, with its output read as it comes and only the
last few KiB kept: a command that floods its output costs no memory, one that hangs (or
leaves a child behind) is killed with its group at the time limit, and one still running
when the agent stops goes with the agent, so nothing outlives its only owner.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time

TIMEOUT = 120.0  # seconds the action may run
KEEP = 4096  # bytes of its output kept for the log line
SHOWN = 200  # characters of that shown


class ActionRun:
    def __init__(self, timeout: float = TIMEOUT) -> None:
        self.timeout = timeout
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False

    def __call__(self, argv: tuple[str, ...]) -> str:
        """Run `argv` to its end or the time limit; a line saying how it ended."""
        with self._lock:
            if self._closed:
                return f"{argv[0]} not run: the agent is stopping"
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                return f"{argv[0]} failed: {exc}"
            self._proc = proc
        assert proc.stdout is not None
        deadline = time.monotonic() + self.timeout
        tail = _read(proc, proc.stdout.fileno(), deadline)
        proc.stdout.close()
        try:
            code: int | None = proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = None
        _kill_group(proc.pid)  # at the limit, or what it left behind in its group
        with self._lock:
            self._proc = None
        proc.wait()
        text = tail.decode(errors="replace").strip()[-SHOWN:]
        how = f"exited with {code}" if code is not None else f"killed after {self.timeout:g}s"
        return f"{' '.join(argv)} {how}" + (f": {text}" if text else "")

    def close(self) -> None:
        """The agent stops: a command still running is killed with its group."""
        with self._lock:
            self._closed = True
            if self._proc is not None:
                _kill_group(self._proc.pid)


def _read(proc: subprocess.Popen[bytes], fd: int, deadline: float) -> bytes:
    """The last KEEP bytes of its output, read until its end, the command's exit (a child
    it left may hold the pipe open) or the deadline."""
    kept = b""
    poller = select.poll()  # not select(): the agent may hold more than 1024 descriptors
    poller.register(fd, select.POLLIN)
    while time.monotonic() < deadline:
        wait = min(0.5, max(0.0, deadline - time.monotonic()))
        if not poller.poll(wait * 1000):
            if proc.poll() is not None:
                break
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        kept = (kept + chunk)[-KEEP:]
    return kept


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
