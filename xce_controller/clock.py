"""The controller's clock: wall time read once, then advanced by the monotonic clock.

Every interval the controller judges (a host's loss grace, a join deadline, a drain timeout)
is a difference of two readings of this clock. Stored times must mean something to the next
process, so they are wall times; but a wall clock stepped by NTP or an operator would, read
directly, make every host lost at once (a step forward longer than the grace) or hold every
timer back (a step back). So the wall clock is read at the start only, and the monotonic
clock measures from there: within one process no step of the wall clock moves an interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class SteadyClock:
    def __init__(
        self,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._monotonic = monotonic
        self._origin = wall() - monotonic()

    def __call__(self) -> float:
        return self._origin + self._monotonic()


class SharedClock:
    """Wall time taken from a shared source (the database's clock), advanced by the monotonic
    clock between readings: replicas sharing one database then agree on every due time, and a
    replica whose own wall clock is wrong fires no timer early or late. Re-read every
    `every` seconds; a reading never goes back."""

    def __init__(
        self,
        source: Callable[[], float],
        monotonic: Callable[[], float] = time.monotonic,
        every: float = 30.0,
    ) -> None:
        self._source = source
        self._monotonic = monotonic
        self._every = every
        self._last = 0.0
        self._origin = 0.0
        self._read_at = -every
        self._sync()

    def _sync(self) -> None:
        before = self._monotonic()
        wall = self._source()
        after = self._monotonic()
        self._origin = wall - (before + after) / 2  # the reading is taken about midway
        self._read_at = after

    def __call__(self) -> float:
        now = self._monotonic()
        if now - self._read_at >= self._every:
            try:
                self._sync()
            except Exception:  # the source is down: keep counting from the last reading
                self._read_at = now
        self._last = max(self._last, self._origin + self._monotonic())
        return self._last
