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
