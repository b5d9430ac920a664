"""The agent's metrics text: what it says, that it is valid, and that it is written only on
change, atomically, without ever stopping the agent."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from xce_agent.config.metrics import MetricsConfig, parse_metrics
from xce_agent.metrics.file import MetricsFile, Tally, exit_code, render, sample
from xce_agent.state import AgentState, ComponentRecord
from xce_agent.supervision.machine import ExitInfo
from xce_protocol.validation import Checker
from xce_protocol.yamlsource import load_text


def state(phase: str = "running", restarts: int = 0) -> AgentState:
    comps = (
        ComponentRecord("worker", "worker", phase, restarts=restarts),
        ComponentRecord("probe", "provisioner", "running"),
    )
    return AgentState(instance_id="i-1", components=comps)


def text_for(phase: str = "running", **kw: object) -> str:
    tally = Tally().observe(True, {"worker": phase})
    exits = {"worker": ExitInfo(None, 9)}
    return render(sample(state(phase), tally, exits, contact=True, decommissioned=False, **kw))  # type: ignore[arg-type]


def test_exit_codes_as_a_shell_reports_them() -> None:
    assert exit_code(None) is None
    assert exit_code(ExitInfo(3, None)) == 3
    assert exit_code(ExitInfo(None, 9)) == 137
    assert exit_code(ExitInfo(None, None, "no such file")) == 127


def test_render_says_what_runs_and_how_the_controller_sees_us() -> None:
    text = text_for()
    assert 'xce_agent_component_up{component="worker",role="worker"} 1' in text
    assert 'xce_agent_component_last_exit_code{component="worker",role="worker"} 137' in text
    assert "xce_agent_controller_contact 1" in text
    assert (
        'xce_agent_component_state{code="",component="worker",phase="running",role="worker"} 1'
        in text
    )
    assert "xce_agent_decommissioned 0" in text
    assert "xce_agent_last_heartbeat" not in text  # none accepted yet: no made-up time
    assert "xce_agent_notice_pending" not in text  # no notice watcher: not claimed
    assert "xce_agent_notice_pending 1" in text_for(notice_pending=True)


def test_tally_counts_give_ups_and_contact_changes_once_each() -> None:
    t = Tally()
    for phase, contact in [
        ("running", True),
        ("fatal", False),
        ("fatal", False),
        ("running", True),
        ("fatal", True),
    ]:
        t = t.observe(contact, {"worker": phase})
    assert dict(t.give_ups) == {"worker": 2}
    assert t.contact_changes == 2


def test_label_values_are_escaped() -> None:
    s = AgentState(instance_id='i"1\\\n', components=())
    text = render(sample(s, Tally(), {}, contact=False, decommissioned=True))
    assert 'instance_id="i\\"1\\\\\\n"' in text


def test_file_written_atomically_and_only_on_change(tmp_path: Path) -> None:
    path = tmp_path / "xce-agent.prom"
    mf = MetricsFile(path)
    s = sample(state(), Tally(), {}, contact=True, decommissioned=False)
    mf.update(s)
    inode = os.stat(path).st_ino
    mf.update(s)
    assert mf.writes == 1 and os.stat(path).st_ino == inode
    mf.update(sample(state(restarts=1), Tally(), {}, contact=True, decommissioned=False))
    assert mf.writes == 2 and os.stat(path).st_ino != inode  # replaced, not rewritten in place
    assert oct(path.stat().st_mode & 0o777) == "0o644"  # node_exporter runs as its own user
    assert [p.name for p in tmp_path.iterdir()] == ["xce-agent.prom"]


def test_unwritable_directory_is_logged_once_and_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "missing" / "xce-agent.prom"
    mf = MetricsFile(path)
    for restarts in (1, 2):
        mf.update(sample(state(restarts=restarts), Tally(), {}, contact=True, decommissioned=False))
    assert mf.writes == 0
    assert sum("metrics file not written" in r.message for r in caplog.records) == 1
    path.parent.mkdir()
    mf.update(sample(state(restarts=3), Tally(), {}, contact=True, decommissioned=False))
    assert mf.writes == 1 and "restarts_total" in path.read_text()


def test_promtool_accepts_the_agent_text() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus; make e2e-deps)")
    tally = Tally(last_heartbeat=1.7e9)
    s = sample(state(), tally, {"worker": ExitInfo(1, None)}, True, False, notice_pending=False)
    for text in (render(s), render(s, now=1.7e9 + 5)):
        out = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stdout + out.stderr


def parse(yaml_text: str) -> tuple[MetricsConfig | None, list[str]]:
    c = Checker("agent.yaml")
    doc = load_text(yaml_text, "agent.yaml")
    return parse_metrics(doc, c), c.problems


def test_metrics_config() -> None:
    cfg, problems = parse(
        "metrics: {textfile: /var/lib/prometheus/node-exporter/x.prom, listen: '127.0.0.1:9871'}\n"
    )
    assert not problems and cfg is not None
    assert cfg.textfile == Path("/var/lib/prometheus/node-exporter/x.prom")
    assert cfg.listen == ("127.0.0.1", 9871)
    assert parse("version: 1\n") == (MetricsConfig(), [])
    for bad, words in [
        ("metrics: {textfile: x.prom}", "an absolute path ending in .prom"),
        ("metrics: {textfile: /tmp/x.txt}", "an absolute path ending in .prom"),
        ("metrics: {listen: 'example.org:80'}", "ADDRESS:PORT"),
        ("metrics: {listen: '127.0.0.1:0'}", "ADDRESS:PORT"),
        ("metrics: {listen: '127.0.0.1:99999'}", "ADDRESS:PORT"),
        ("metrics: {colour: red}", "unknown key 'colour'"),
        ("metrics: [1]", "a mapping"),
    ]:
        _, problems = parse(bad + "\n")
        assert len(problems) == 1 and words in problems[0], (bad, problems)
        assert "agent.yaml line 1" in problems[0]


def test_codes_are_saved_beside_the_records_and_read_back() -> None:
    s = AgentState(components=(ComponentRecord("worker", "worker", "fatal", code="worker_fatal"),))
    data = s.to_json()
    assert "code" not in data["components"][0]  # an older agent reads the records unchanged
    assert data["codes"] == {"worker": "worker_fatal"}
    assert AgentState.from_json(data).components[0].code == "worker_fatal"
    del data["codes"]
    assert AgentState.from_json(data).components[0].code == ""


def test_a_busy_port_is_logged_and_the_file_still_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import socket

    from xce_agent.metrics.agent import AgentMetrics

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = MetricsConfig(tmp_path / "a.prom", ("127.0.0.1", port))
        metrics = AgentMetrics(cfg)
    assert metrics.port is None and "metrics port 127.0.0.1" in caplog.text
    metrics.start()
    metrics.update(state(), {}, contact=True, decommissioned=False)
    metrics.stop()
    assert "xce_agent_component_up" in (tmp_path / "a.prom").read_text()


def test_the_port_serves_the_latest_sample_with_the_heartbeat_age(tmp_path: Path) -> None:
    import time
    import urllib.request

    from xce_agent.metrics.agent import AgentMetrics

    metrics = AgentMetrics(MetricsConfig(None, ("127.0.0.1", 0)))
    assert metrics.port is not None
    metrics.start()
    try:
        url = f"http://127.0.0.1:{metrics.port.port}"
        metrics.heartbeat_accepted(time.time() - 30)
        metrics.update(state(), {}, contact=True, decommissioned=False)
        with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        line = next(x for x in text.splitlines() if x.startswith("xce_agent_heartbeat_age"))
        age = float(line.split()[1])
        assert 29 <= age < 60
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(url + "/other", timeout=5)
    finally:
        metrics.stop()


def test_notice_pending_while_a_provider_event_is_active(tmp_path: Path) -> None:
    from xce_agent.metrics.agent import AgentMetrics

    metrics = AgentMetrics(MetricsConfig(tmp_path / "a.prom"))
    metrics.update(state(), {}, contact=True, decommissioned=False)
    assert "notice_pending" not in (tmp_path / "a.prom").read_text()  # no watcher: no claim
    metrics.watching_notices = True
    for event, active, pending in [
        ("e1", True, 1),
        ("e2", True, 1),
        ("e1", False, 1),
        ("e2", False, 0),
    ]:
        metrics.notice(event, active)
        metrics.update(state(), {}, contact=True, decommissioned=False)
        assert f"xce_agent_notice_pending {pending}" in (tmp_path / "a.prom").read_text()
