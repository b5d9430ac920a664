"""The agent's metrics port and textfile under abuse: a port already taken, connections that
never send a request, a textfile deleted under the agent."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import requests

from xce_agent.config.metrics import MetricsConfig
from xce_agent.metrics import port as metrics_port
from xce_agent.metrics.agent import AgentMetrics
from xce_agent.state import AgentState, ComponentRecord
from xce_agent.supervision.machine import ExitInfo

STATE = AgentState(
    instance_id="i-1", components=(ComponentRecord("worker", "worker", "running", restarts=2),)
)
EXITS: dict[str, ExitInfo | None] = {"worker": ExitInfo(1, None)}


def test_a_taken_port_is_one_error_line_and_the_textfile_still_works(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = MetricsConfig(textfile=tmp_path / "a.prom", listen=("127.0.0.1", port))
        metrics = AgentMetrics(cfg)
    lines = [r.getMessage() for r in caplog.records if "metrics port" in r.getMessage()]
    assert lines == [f"metrics port 127.0.0.1:{port} not served: Address already in use"]
    assert metrics.port is None
    metrics.start()
    metrics.update(STATE, EXITS, contact=True, decommissioned=False)
    assert "xce_agent_component_restarts_total" in (tmp_path / "a.prom").read_text()
    metrics.stop()


def test_a_connection_that_sends_nothing_is_dropped_and_scrapes_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics_port, "REQUEST_TIMEOUT", 0.5)
    metrics = AgentMetrics(MetricsConfig(listen=("127.0.0.1", 0)))
    assert metrics.port is not None
    metrics.start()
    try:
        metrics.update(STATE, EXITS, contact=True, decommissioned=False)
        url = f"http://127.0.0.1:{metrics.port.port}/metrics"
        sloths = [socket.create_connection(("127.0.0.1", metrics.port.port)) for _ in range(20)]
        for sloth in sloths:  # accepted (connected), then closed by the server, not by us
            sloth.settimeout(30)
            started = time.monotonic()
            assert sloth.recv(1) == b""
            assert time.monotonic() - started < 29
            sloth.close()
        r = requests.get(url, timeout=10)
        assert r.status_code == 200 and "xce_agent_component_up" in r.text
    finally:
        metrics.stop()


def test_a_textfile_deleted_under_the_agent_comes_back_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "a.prom"
    metrics = AgentMetrics(MetricsConfig(textfile=path))
    metrics.update(STATE, EXITS, contact=False, decommissioned=False)
    first = path.read_text()
    assert metrics.file is not None and metrics.file.writes == 1
    path.unlink()
    metrics.restore()  # nothing changed (the controller is still unreachable): the periodic call
    assert path.read_text() == first and metrics.file.writes == 2
    metrics.restore()
    assert metrics.file.writes == 2  # present: not written again
    path.unlink()
    metrics.update(STATE, EXITS, contact=False, decommissioned=False)  # the same sample
    assert path.read_text() == first and metrics.file.writes == 3
