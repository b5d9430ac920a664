"""Events applied one at a time and in order, even when applying one posts another.

An action of one event (a spawn, a lease granted) may report back (the process is up)
before the other actions of that event are done. Applying the report at once would let a
step see a state its predecessor has not finished with; the queue holds it until then.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

E = TypeVar("E")


class EventQueue(Generic[E]):
    """`post` applies the event now, or after the one being applied when called from it."""

    def __init__(self, apply: Callable[[str, E], None]) -> None:
        self._apply = apply
        self._queue: deque[tuple[str, E]] = deque()
        self._draining = False

    def post(self, name: str, event: E) -> None:
        self._queue.append((name, event))
        if self._draining:
            return
        self._draining = True
        try:
            while self._queue:
                self._apply(*self._queue.popleft())
        finally:
            self._draining = False
