"""A component flooding its output (`yes`, or no newline at all) beside one that crashes.

Before output was bounded, `yes` starved the loop: the other component's exit was noticed
4-5 s late and the agent grew to 1 GB. Now the exit is handled within milliseconds, the
log gets at most the rate limit plus a "suppressed N lines" note, and memory stays flat.
"""

from __future__ import annotations

import logging
import statistics
import sys
import time
from pathlib import Path

import psutil
import pytest

from xce_agent.supervision import machine as m
from xce_agent.supervision.output import BURST, RATE
from xce_agent.supervision.reactor import Reactor
from xce_agent.supervision.spec import ComponentSpec, RestartSpec
from xce_agent.supervision.supervisor import Supervisor

FLOODS = {
    "yes": ("yes",),
    "no-newline": ("/bin/sh", "-c", "tr '\\000' x < /dev/zero"),
}


class Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.parametrize("flood", sorted(FLOODS))
def test_a_flood_never_delays_another_components_exit(tmp_path: Path, flood: str) -> None:
    stamp = tmp_path / "exit-at"
    crasher = (
        "import os, time\ntime.sleep(0.2)\n"
        f"open({str(stamp)!r}, 'a').write(repr(time.monotonic()) + '\\n')\nos._exit(3)\n"
    )
    restart = RestartSpec(initial_delay=0.05, delay=0.05, max_delay=0.05, jitter=0)
    specs = [
        ComponentSpec("crasher", (sys.executable, "-c", crasher), restart=restart),
        ComponentSpec("flood", FLOODS[flood]),
    ]
    noticed: list[float] = []

    def changed(name: str, state: m.ComponentState) -> None:
        if name == "crasher" and state.phase is m.Phase.BACKOFF:
            noticed.append(time.monotonic())

    counter = Counter()
    logger = logging.getLogger("xce_agent.component")
    logger.addHandler(counter)
    logger.setLevel(logging.INFO)
    reactor = Reactor()
    sup = Supervisor(specs, reactor, output_dir=tmp_path / "out", on_change=changed)
    me = psutil.Process()
    rss_before = me.memory_info().rss
    try:
        sup.start_all()
        began = time.monotonic()
        deadline = began + 30
        while len(noticed) < 6 and time.monotonic() < deadline:
            reactor.run_once(max_wait=0.1)
        elapsed = time.monotonic() - began
        rss_growth = (me.memory_info().rss - rss_before) / 2**20
    finally:
        sup.stop_all("test over")
        end = time.monotonic() + 10
        while not sup.idle() and time.monotonic() < end:
            reactor.run_once(max_wait=0.1)
        sup.close()
        reactor.close()
        logger.removeHandler(counter)
    exits = [float(x) for x in stamp.read_text().split()]
    assert len(noticed) >= 6, f"only {len(noticed)} exits noticed in {elapsed:.1f}s"
    delays = [n - e for e, n in zip(exits, noticed)]
    assert all(d >= 0 for d in delays)
    assert statistics.median(delays) < 0.05, delays  # was 4-5 s
    assert max(delays) < 0.5, delays
    flood_lines = [line for line in counter.lines if line.startswith("flood: ")]
    assert len(flood_lines) <= BURST + RATE * elapsed + 20
    if flood == "yes":
        assert any("suppressed" in line for line in flood_lines)
    assert all(len(line) <= 4200 for line in flood_lines)
    assert rss_growth < 50, f"the agent grew by {rss_growth:.0f} MB"
