"""An idle agent without a controller or a metrics textfile sleeps untimed: no thread of it
wakes while its one component sleeps.

Counted as the benchmark counts (bench/supervision.py): voluntary context switches summed over
every thread in /proc/PID/task. A 5 s stall check of the controller link's threads once ran
without a controller too: 12 wakeups a minute for nothing.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.supervision import wakeups
from tests.integration.helpers import wait_for

WINDOW = 11.0  # two periods of the old 5 s check, whatever its phase


def test_an_idle_agent_without_a_controller_does_not_wake(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    state = tmp_path / "state"
    config.write_text(
        "version: 1\ninstance: {id: idle}\nroles:\n  worker:\n    components:\n"
        "      child:\n        command: [/bin/sleep, '3600']\n"
        f"state_directory: {state}\nlog_level: warning\n"
    )
    agent = subprocess.Popen(
        [sys.executable, "-m", "xce_agent", "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        record = state / "state.json"
        wait_for(lambda: record.exists() and '"phase": "running"' in record.read_text(), 20)
        time.sleep(2.5)  # past the start's own writes (the output tail is saved 2 s after)
        before = wakeups(agent.pid)
        assert before > 0  # the count is read: the agent woke while it started
        time.sleep(WINDOW)  # the measured window
        woke = wakeups(agent.pid) - before
        assert agent.poll() is None
        assert woke <= 1, f"{woke} wakeups in {WINDOW:g} s of idling"
    finally:
        agent.send_signal(signal.SIGUSR2)
        agent.wait(timeout=20)
