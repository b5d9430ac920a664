"""The textfile tells a running agent from a stopped or dead one: `xce_agent_up` 1 while it
runs, a short down text once it stopped, and an mtime never older than TOUCH_AFTER while it
runs (node_textfile_mtime_seconds), even when nothing changes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.test_agent_metrics import text_for
from xce_agent.metrics.file import TOUCH_AFTER, MetricsFile, Tally, render_down, sample
from xce_agent.state import AgentState


def test_a_running_agent_says_it_is_up() -> None:
    series = [line for line in text_for().splitlines() if not line.startswith("#")]
    assert series[0] == "xce_agent_up 1"


def test_the_down_text_keeps_no_value_of_the_stopped_agent() -> None:
    text = render_down("i-1", decommissioned=True)
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        "xce_agent_up 0",
        'xce_agent_info{instance_id="i-1"} 1',
        "xce_agent_decommissioned 1",
    ]
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus; make e2e-deps)")
    out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def _file(tmp_path: Path) -> MetricsFile:
    metrics = MetricsFile(tmp_path / "xce-agent.prom")
    metrics.update(sample(AgentState(instance_id="i-1"), Tally(), {}, True, False))
    return metrics


def test_an_unchanged_file_is_touched_once_its_mtime_is_old(tmp_path: Path) -> None:
    metrics = _file(tmp_path)
    old = os.stat(metrics.path).st_mtime - TOUCH_AFTER - 5
    os.utime(metrics.path, (old, old))
    metrics.restore(now=old + TOUCH_AFTER - 1)  # young enough from where it stands
    assert os.stat(metrics.path).st_mtime == old
    metrics.restore()
    assert os.stat(metrics.path).st_mtime > old + TOUCH_AFTER  # touched, the text the same
    assert metrics.writes == 1 and "xce_agent_up 1" in metrics.path.read_text()


def test_mark_down_replaces_the_values(tmp_path: Path) -> None:
    metrics = _file(tmp_path)
    assert "xce_agent_controller_contact 1" in metrics.path.read_text()  # the values were there
    metrics.mark_down("i-1", decommissioned=False)
    assert metrics.path.read_text() == render_down("i-1", False)
