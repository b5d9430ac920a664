"""When each held watch ends: a jittered hold, and expiries released a slice at a time.

A watch (long-poll) is held until its host changes or its hold ends. Agents that start
together (every one reconnects within a second of a controller restart) ask for the same
timeout, so their holds would end in the same instant, every time, and the loop would answer
thousands of watches before it reads the next heartbeat. Two things keep that off the
heartbeat path: each hold is a random share (HOLD_SHARE) of what was asked, so watches that
start in phase end spread over seconds and drift apart; and expiries are kept in coarse
buckets with one timer for all of them, released SLICE at a time, each slice a separate turn
of the loop, so the sockets ready meanwhile (heartbeats) are read between two slices.

A host's first watch of a round (after a controller restart, an agent's restart, any watch
that does not follow the host's last answer within REWATCH) is held for a draw of the time
left in a hold already under way (`first_hold`), not for a hold of its own: that spreads the
first round's ends over the whole of what was asked, at the rate of the steady state. A hold
of its own would end every watch of the burst within 60-100 % of the timeout, at twice the
steady rate, and that peak of answers and re-watches, seconds long, came on top of the
heartbeats. The controller's own watch history decides, not the connection: a proxy may carry
many agents' requests on one connection, or one agent's on several.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable

HOLD_SHARE = (0.6, 1.0)  # a watch is held for this share of the timeout it asked for
BUCKET = 0.05  # seconds: expiries this close together are released together
SLICE = 64  # watches released per turn of the loop
REWATCH = 5.0  # seconds: a watch this soon after the host's last answer continues its round


def first_hold(asked: float, u: float, v: float) -> float:
    """A hold's residual life at a random instant, from two uniform draws: a hold picked in
    proportion to its length (watches are more likely to be found in a long hold), then a
    uniform point in it. Watches that all start now then end at the steady rate from the
    start, asked / mean hold per second, instead of all within the span of one hold."""
    low, high = HOLD_SHARE
    length_biased = math.sqrt(low * low + u * (high * high - low * low))
    return asked * v * length_biased


class Expiries:
    def __init__(
        self,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rand = rand
        self.clock = clock
        self._answered: dict[str, float] = {}  # host key -> when its last watch ended
        self._buckets: dict[int, list[asyncio.Future[None]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._armed: int | None = None
        self.released = 0  # watches ended by their hold (tests, metrics)

    def first(self, key: str, held: bool) -> bool:
        """Whether host `key`'s watch starts a round: it has another watch `held` (its agent
        restarted), or its last one did not end within REWATCH."""
        return held or self.clock() - self._answered.get(key, -math.inf) > REWATCH

    def answered(self, key: str) -> None:
        """Host `key`'s watch ended (its hold, or its host changed)."""
        self._answered[key] = self.clock()

    def hold(self, asked: float, first: bool = False) -> float:
        """How long a watch that asked for `asked` seconds is held; `first`: a round's first
        (first_hold)."""
        if first:
            return first_hold(asked, self.rand(), self.rand())
        low, high = HOLD_SHARE
        return asked * (low + (high - low) * self.rand())

    def add(self, fut: asyncio.Future[None], seconds: float) -> None:
        """End `fut` (set its result) after `seconds`, unless it is done before."""
        loop = self._loop = asyncio.get_running_loop()
        slot = math.ceil((loop.time() + seconds) / BUCKET)
        self._buckets.setdefault(slot, []).append(fut)
        if self._armed is None or slot < self._armed:
            self._arm(slot)

    def _arm(self, slot: int) -> None:
        assert self._loop is not None
        if self._timer is not None:
            self._timer.cancel()
        self._armed = slot
        self._timer = self._loop.call_at(slot * BUCKET, self._fire)

    def _fire(self) -> None:
        assert self._loop is not None
        self._timer = self._armed = None
        now = math.floor(self._loop.time() / BUCKET)
        due: list[asyncio.Future[None]] = []
        for slot in sorted(s for s in self._buckets if s <= now):
            due += self._buckets.pop(slot)
        self._release(due)
        if self._buckets:
            self._arm(min(self._buckets))

    def _release(self, due: list[asyncio.Future[None]]) -> None:
        """End the first SLICE of `due` now and the rest on later turns of the loop."""
        for fut in due[:SLICE]:
            if not fut.done():
                fut.set_result(None)
                self.released += 1
        if len(due) > SLICE and self._loop is not None:
            self._loop.call_soon(self._release, due[SLICE:])

    def close(self) -> None:
        """End every held watch now (the controller is stopping)."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._armed = None
        buckets, self._buckets = self._buckets, {}
        for futures in buckets.values():
            for fut in futures:
                if not fut.done():
                    fut.set_result(None)
