"""A small single-threaded event loop: file readiness, timers, thread hand-off, signals.

The agent sleeps in one `select` until a pidfd, an output pipe, a signal or the next timer
needs it: no polling tick, so an idle agent costs no wakeups beyond its own timers.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import selectors
import signal
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Protocol

log = logging.getLogger(__name__)

# The longest single wait: far below the 2**31 ms epoll/poll accept, so no timer, however
# far away, can overflow select (a later timer just costs one more wake-up an hour).
MAX_WAIT = 3600.0


class Clock(Protocol):
    def monotonic(self) -> float: ...


class SystemClock:
    def monotonic(self) -> float:
        import time

        return time.monotonic()


@dataclass(order=True)
class _Timer:
    when: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


class TimerHandle:
    def __init__(self, timer: _Timer) -> None:
        self._timer = timer

    def cancel(self) -> None:
        self._timer.cancelled = True


class Reactor:
    """select()-based loop; callbacks run on the thread that calls `run`."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self._selector = selectors.DefaultSelector()
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        self._pending: deque[Callable[[], None]] = deque()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._selector.register(self._wake_r, selectors.EVENT_READ, self._drain_wakeups)
        self._signal_handlers: dict[int, Callable[[int], None]] = {}
        self._saved: dict[int, object] = {}
        self._old_wakeup_fd: int | None = None
        self.stopped = False

    # readers
    def add_reader(self, fd: int, callback: Callable[[], None]) -> None:
        self._selector.register(fd, selectors.EVENT_READ, callback)

    def remove_reader(self, fd: int) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(fd)

    # timers
    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        timer = _Timer(when, next(self._seq), callback)
        heapq.heappush(self._timers, timer)
        return TimerHandle(timer)

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        return self.call_at(self.clock.monotonic() + delay, callback)

    # cross-thread
    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._pending.append(callback)
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"\0")

    def _drain_wakeups(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass

    # signals: handlers only record the signal; the loop dispatches it
    def add_signal_handler(self, signum: int, callback: Callable[[int], None]) -> None:
        if self._old_wakeup_fd is None:
            self._old_wakeup_fd = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        self._signal_handlers[signum] = callback
        self._saved[signum] = signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._pending.append(lambda: self._signal_handlers[signum](signum))

    def deliver(self, signum: int) -> None:
        """Dispatch `signum` to its handler as if it had just arrived (one that came before
        the handler was installed: system/start_signals.py)."""
        if signum in self._signal_handlers:
            self.call_soon_threadsafe(lambda: self._signal_handlers[signum](signum))

    def restore_signals(self) -> None:
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._saved.clear()
        if self._old_wakeup_fd is not None:
            signal.set_wakeup_fd(self._old_wakeup_fd)
            self._old_wakeup_fd = None

    def stop(self) -> None:
        self.stopped = True
        self._wake()

    def run(self, until: Callable[[], bool] | None = None) -> None:
        """Dispatch until `stop()` or until `until()` is true after a dispatch round."""
        self.stopped = False
        while not self.stopped and not (until and until()):
            self.run_once()

    def run_once(self, max_wait: float | None = None) -> None:
        timeout = self._timeout(max_wait)
        for key, _ in self._selector.select(timeout):
            callback = key.data
            callback()
        self._run_pending()
        self._run_due_timers()

    def _timeout(self, max_wait: float | None) -> float | None:
        if self._pending:
            return 0
        while self._timers and self._timers[0].cancelled:
            heapq.heappop(self._timers)
        timeout = None
        if self._timers:
            timeout = max(0.0, self._timers[0].when - self.clock.monotonic())
        if max_wait is not None:
            timeout = max_wait if timeout is None else min(timeout, max_wait)
        return MAX_WAIT if timeout is None else min(timeout, MAX_WAIT)

    def _run_pending(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    return
                callback = self._pending.popleft()
            callback()

    def _run_due_timers(self) -> None:
        now = self.clock.monotonic()
        while self._timers and (self._timers[0].cancelled or self._timers[0].when <= now):
            timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                timer.callback()

    def close(self) -> None:
        self.restore_signals()
        self._selector.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
