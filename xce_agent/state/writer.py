"""`StateWriter`: the state saved on a thread of its own, so the event loop never waits on
an fsync."""

from __future__ import annotations

import logging

from xce_agent.state.model import AgentState
from xce_agent.state.store import StateStore

log = logging.getLogger("xce_agent.state")  # the name these lines had in the journal


class StateWriter:
    """Writes the latest submitted state on a thread, so the event loop never waits on fsync.

    Submissions coalesce: a burst of changes costs one write. `flush` waits until the newest
    submission is on disk (the agent calls it before it exits).
    """

    def __init__(self, store: StateStore) -> None:
        import threading

        self.store = store
        self._cond = threading.Condition()
        self._pending: AgentState | None = None
        self._submitted = 0
        self._written = 0
        self._failed: tuple[int, str] = (0, "")  # the last submission a failed write covered
        self.last_error = ""  # why the last write failed; "" once one succeeded
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="state-writer", daemon=True)
        self._thread.start()

    def submit(self, state: AgentState) -> None:
        with self._cond:
            self._pending = state
            self._submitted += 1
            self._cond.notify_all()

    def flush(self, timeout: float = 10.0) -> None:
        with self._cond:
            target = self._submitted
            self._cond.wait_for(lambda: self._written >= target, timeout)

    def save_now(self, state: AgentState, timeout: float = 10.0) -> str:
        """Submit `state` and wait until a write covering it ended; "" once it is on disk
        (fsync'ed), else why not (the write-ahead of a component's start, prestart.py)."""
        with self._cond:
            self._pending = state
            self._submitted += 1
            target = self._submitted
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self._written >= target, timeout):
                return f"saving the state took over {timeout:g}s"
            number, why = self._failed
            return why if number >= target else ""

    def close(self) -> None:
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                state, self._pending = self._pending, None
                number = self._submitted
            why = ""
            try:
                self.store.save(state)
            except OSError as exc:
                why = f"cannot save state to {self.store.path}: {exc.strerror or exc}"
                log.error("%s", why)
            with self._cond:
                self.last_error = why
                if why:
                    self._failed = (number, why)
                self._written = max(self._written, number)
                self._cond.notify_all()
