"""The link's long-lived loops as watched threads (link.py runs two: membership and watch).

A loop runs its cycles on a thread of its own; an exception costs one cycle, never the
thread. Before each cycle, and before each wait, it declares by when it will have finished
(`due`); the link's watchdog (`ControllerLink.check_threads`) asks for the loops that
overran and replaces each with a new generation: the stuck thread's next check sees it is
no longer current and ends.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass
class Loop:
    name: str
    run: Callable[[int], None]
    generation: int = 0
    due: float = math.inf  # monotonic time by which the current cycle must be done
    thread: threading.Thread | None = None


class Loops:
    """The loops of one link, by name. `bound(wait)` is how long a cycle that first waits
    `wait` seconds may take; `live()` is False once the link has nothing more to do;
    `failed(loop, exc, failures)` is called (in the except block) after a cycle raised."""

    def __init__(
        self,
        clock: Callable[[], float],
        bound: Callable[[float], float],
        live: Callable[[], bool],
        failed: Callable[[Loop, Exception, int], None],
    ) -> None:
        self.clock = clock
        self.bound = bound
        self.live = live
        self.failed = failed
        self._by_name: dict[str, Loop] = {}
        self._lock = threading.Lock()

    def add(self, name: str, run: Callable[[int], None]) -> None:
        self._by_name[name] = Loop(name, run)

    def __getitem__(self, name: str) -> Loop:
        return self._by_name[name]

    def values(self) -> Iterator[Loop]:
        return iter(self._by_name.values())

    def spawn(self, loop: Loop) -> None:
        """Start the loop's next generation on a new thread (the previous one ends)."""
        with self._lock:
            loop.generation += 1
            generation = loop.generation
            loop.due = self.clock() + self.bound(0.0)
        thread = threading.Thread(
            target=self._guarded, args=(loop, generation), name=f"controller-{loop.name}"
        )
        thread.daemon = True
        loop.thread = thread
        thread.start()

    def current(self, loop: Loop, generation: int) -> bool:
        return loop.generation == generation and self.live()

    def arm(self, loop: Loop) -> None:
        """A cycle begins: it must be done within the bound of one without a wait."""
        loop.due = self.clock() + self.bound(0.0)

    def wait(self, loop: Loop, seconds: float, event: threading.Event) -> bool:
        """Sleep up to `seconds` (declared as this cycle's bound); True if woken early."""
        loop.due = self.clock() + self.bound(seconds)
        return event.wait(seconds)

    def overdue(self) -> list[tuple[Loop, float]]:
        """The loops past their cycle's bound, each with how far past it (none once the
        link has nothing more to do)."""
        now = self.clock()
        return [(loop, now - loop.due) for loop in self.values() if self.live() and now > loop.due]

    def _guarded(self, loop: Loop, generation: int) -> None:
        """Run the loop's cycles; an exception costs one cycle, never the thread."""
        failures = 0
        while self.current(loop, generation):
            try:
                loop.run(generation)
                failures = 0
            except Exception as exc:
                self.failed(loop, exc, failures)
                failures += 1
