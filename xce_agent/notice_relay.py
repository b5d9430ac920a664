"""Telling the worker a notice arrived: the notice file, then each component's notice_signal.

A component with `notice_signal` gets `XCE_NOTICE_FILE` in its environment. When a
preemption, termination or maintenance notice arrives (or changes, or ends), the agent
rewrites that file atomically, so the component never reads half of it, and then sends the
signal through the process's pidfd, so a reused pid never gets it.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from xce_agent.supervision.spec import ComponentSpec
from xce_protocol.atomic_file import write_atomic
from xce_protocol.notices import Notice, NoticeKind

log = logging.getLogger(__name__)

NOTICE_FILE = "notice.json"
ENV = "XCE_NOTICE_FILE"
RELAYED = (NoticeKind.PREEMPTION, NoticeKind.TERMINATION, NoticeKind.MAINTENANCE)


def with_notice_file(spec: ComponentSpec, state_directory: Path) -> ComponentSpec:
    """The spec with XCE_NOTICE_FILE in its environment when it asks for notices."""
    if spec.notice_signal is None:
        return spec
    env = {**spec.environment, ENV: str(state_directory / NOTICE_FILE)}
    return replace(spec, environment=env)


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
        self.path = state_directory / NOTICE_FILE
        self.wall = wall

    def relay(self, notice: Notice) -> list[str]:
        """Write the file and signal the components; the names of those signalled."""
        if notice.kind not in RELAYED or not self.specs:
            return []
        try:
            write_atomic(self.path, notice_document(notice, self.wall()), mode=0o644)
        except OSError as exc:
            log.warning("could not write %s: %s; not signalling", self.path, exc)
            return []
        signalled = []
        for name, spec in self.specs.items():
            if spec.notice_signal is None or not self.send_signal(name, spec.notice_signal):
                continue
            signalled.append(name)
            log.info(
                "%s: sent %s for the %s notice",
                name,
                signal.Signals(spec.notice_signal).name,
                notice.kind.value,
            )
        return signalled
