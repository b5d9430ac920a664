"""The fact listener of a replica: one LISTEN connection to the primary, in its own thread,
telling the replica of each new head, and polling when no notification comes (postgres.py's
commits send one NOTIFY each, carrying only the new head)."""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Callable

import psycopg

from xce_controller.store.pg_connection import CONNECT_TIMEOUT, why

log = logging.getLogger("xce_controller.store.postgres")  # the name operators' filters know
CHANNEL = "xce_facts"


class Listener:
    """One LISTEN connection: `told(head)` on each NOTIFY, and `told(None)` every `poll`
    seconds without one (the poll that alone keeps followers correct) or while the
    connection is down. Runs in its own thread; `told` must hand over to the caller's loop."""

    def __init__(self, conninfo: str, told: Callable[[int | None], None], poll: float) -> None:
        self.conninfo = conninfo
        self.told = told
        self.poll = poll
        self.cut = False  # tests: stop listening, keep polling (the fallback alone)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-listener", daemon=True)
        self.connected = threading.Event()

    def start(self) -> Listener:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except (psycopg.Error, OSError) as exc:
                self.connected.clear()
                log.warning("fact listener lost its connection (%s); polling", why(exc))
                self.told(None)
                self._stop.wait(self.poll)

    def _listen(self) -> None:
        with psycopg.connect(
            self.conninfo, autocommit=True, connect_timeout=int(CONNECT_TIMEOUT)
        ) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self.connected.set()
            self.told(None)  # whatever was appended while nobody listened
            last = time.monotonic()
            while not self._stop.is_set():
                ready, _, _ = select.select([conn.fileno()], [], [], self.poll)
                head: int | None = None
                if ready:
                    conn.pgconn.consume_input()  # raises once the connection is gone
                    while (note := conn.pgconn.notifies()) is not None:
                        if not self.cut:
                            head = max(head or 0, int(note.extra.decode() or 0))
                if head is not None or time.monotonic() - last >= self.poll:
                    last = time.monotonic()
                    self.told(head)
