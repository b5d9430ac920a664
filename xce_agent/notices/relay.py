"""Telling the worker a notice arrived: its notice file, then its notice_signal.

A component with `notice_signal` gets `XCE_NOTICE_FILE` (`STATE_DIR/notice-NAME.json`) in its
environment. When a preemption, termination or maintenance notice arrives (or changes, or
ends), the agent rewrites that file atomically, so the component never reads half of it,
readable by the component's user only (owned by it, 0400, like the template; root 0600
without `user:`), and then sends the signal through the process's pidfd, so a reused pid
never gets it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from xce_agent.config.notice_file import notice_path
from xce_agent.supervision.spec import ComponentSpec
from xce_agent.system.reader import reader_of
from xce_protocol.atomic_file import write_atomic
from xce_protocol.notices import Notice, NoticeKind

log = logging.getLogger(__name__)

RELAYED = (NoticeKind.PREEMPTION, NoticeKind.TERMINATION, NoticeKind.MAINTENANCE)


def notice_document(notice: Notice, now: float) -> str:
    return json.dumps({**notice.to_wire(), "received_at": now}, indent=2) + "\n"


class NoticeRelay:
    def __init__(
        self,
        specs: dict[str, ComponentSpec],
        send_signal: Callable[[str, int], bool],
        state_directory: Path,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.specs = {n: s for n, s in specs.items() if s.notice_signal is not None}
        self.send_signal = send_signal  # through the process's pidfd
        self.directory = state_directory
        self.wall = wall

    def relay(self, notice: Notice) -> list[str]:
        """Write each file and signal its component; the names of those signalled."""
        if notice.kind not in RELAYED:
            return []
        text = notice_document(notice, self.wall())
        signalled = []
        for name, spec in self.specs.items():
            if spec.notice_signal is None or not self._write(spec, text):
                continue
            if not self.send_signal(name, spec.notice_signal):
                continue
            signalled.append(name)
            log.info(
                "%s: sent %s for the %s notice",
                name,
                signal.Signals(spec.notice_signal).name,
                notice.kind.value,
            )
        return signalled

    def _write(self, spec: ComponentSpec, text: str) -> bool:
        path = notice_path(spec, self.directory)
        uid = reader_of([spec]).uid if os.geteuid() == 0 else None
        try:
            write_atomic(path, text, mode=0o400 if uid is not None else 0o600, owner=uid)
        except OSError as exc:
            log.warning("%s: could not write %s (%s): not signalling", spec.name, path, exc)
            return False
        return True
