"""Per-host due times in a heap: the controller wakes when something is due, not on a tick.

Each host has at most one live due time (the latest `set`); older heap entries are skipped
when they surface. A heartbeat does not touch the heap: the loss timer fires at the old due
time, finds the host heard from since, and is set again from the new time, so a host that
heartbeats every interval costs one wakeup per grace rather than one per beat.
"""

from __future__ import annotations

import heapq


class Timers:
    def __init__(self) -> None:
        self._heap: list[tuple[float, str]] = []
        self._due: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._due)

    def set(self, key: str, due: float | None) -> None:
        """Make `due` the host's next due time (None: nothing is due for it by time)."""
        if due is None:
            self._due.pop(key, None)
            return
        if self._due.get(key) == due:
            return
        self._due[key] = due
        heapq.heappush(self._heap, (due, key))
        if len(self._heap) > 4 * len(self._due) + 64:
            self._compact()

    def next(self) -> float | None:
        """The earliest live due time."""
        while self._heap:
            due, key = self._heap[0]
            if self._due.get(key) == due:
                return due
            heapq.heappop(self._heap)
        return None

    def pop_due(self, now: float) -> list[str]:
        """Hosts whose due time has come, each once; they are no longer scheduled."""
        keys = []
        while self._heap and self._heap[0][0] <= now:
            due, key = heapq.heappop(self._heap)
            if self._due.get(key) == due:
                del self._due[key]
                keys.append(key)
        return keys

    def _compact(self) -> None:
        self._heap = [(due, key) for key, due in self._due.items()]
        heapq.heapify(self._heap)
