"""When the controller could not hear its hosts, so that the time does not count against them.

Its event loop stopped (the process stopped or its machine paused, a call that blocked), or,
among replicas, its database could not be reached: heartbeats sent meanwhile were never heard,
or heard but never shared. Judged on the clock alone, every host would then be lost the moment
the controller runs again, before it reads the heartbeats waiting for it. So once a stall
longer than STALL ends, every host gets a fresh grace from its end (deadlines.py's
alive_since), as after the controller's start or a failover. A tick every TICK seconds, and
every timer pass before it decides, looks for one.

After a stall (or a start, or a failover) every host's grace ends at the same instant. Each
host is first looked at a random moment in the last half of its grace instead (first_look):
a host heard since is then set again from its heartbeat, so the fleet's checks spread as its
heartbeats do (5,000 hosts' checks at one instant held each replica's loop for about 100 ms).
"""

from __future__ import annotations

import time
from collections.abc import Callable

STALL = 2.0  # seconds unheard that count as a stall: far above any pause of a busy loop
TICK = 1.0  # a tick a second: an idle controller of 10,000 hosts stays near no work


class StallWatch:
    def __init__(
        self, hearing: Callable[[], bool], monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._hearing = hearing  # False while the store cannot be reached
        self._monotonic = monotonic
        self._last = monotonic()  # the last check that found the controller hearing
        self.stalls = 0  # stalls ended since start, and the longest one's seconds
        self.longest = 0.0

    def begin(self) -> None:
        """Count from now: the time before the loop ran is the start's, not a stall (a
        start already gives every host its grace)."""
        self._last = self._monotonic()

    def ended(self) -> float:
        """The length of the stall that ended just now, else 0."""
        now = self._monotonic()
        if not self._hearing():
            return 0.0
        gap, self._last = now - self._last, now
        if gap <= STALL:
            return 0.0
        self.stalls += 1
        self.longest = max(self.longest, gap)
        return gap


def first_look(due: float, now: float, grace: float, draw: float) -> float:
    """When to look at a host whose grace began when every host's did (a start, a stall, a
    failover) and ends at `due`, for a `draw` in [0, 1). Early is harmless (nothing is due
    yet; the host is set again), late never; once in the grace's last half, at `due` itself,
    so a host is looked at early once at most."""
    if now >= due - grace / 2:
        return due
    return due - draw * grace / 2
