"""The real `xce-agent` process: notify protocol, restart keeps the worker, stop, exit 78."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import alive, wait_for
from xce_protocol.times import parse_time

AGENT = [sys.executable, "-m", "xce_agent"]
WORKER = "import time\nprint('worker up', flush=True)\ntime.sleep(600)\n"


def write_config(tmp_path: Path, extra: str = "") -> Path:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    config = tmp_path / "agent.yaml"
    config.write_text(
        "version: 1\n"
        "controller:\n  url: http://127.0.0.1:9\n  token: very-secret-token\n"
        "instance:\n  id: i-test\n  template: small\n"
        # A provisioner-role component that is no singleton starts at once; worker-role ones
        # wait for a join (and a singleton for its lease).
        "roles:\n  provisioner:\n    components:\n      xce-worker:\n"
        f"        command: [{sys.executable}, {script}]\n"
        "        stop_timeout: 5s\n        singleton: false\n"
        f"state_directory: {tmp_path / 'state'}\n{extra}"
    )
    return config


class NotifySocket:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.1)
        self.messages: list[str] = []

    def collect(self) -> list[str]:
        while True:
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except (TimeoutError, socket.timeout):
                return self.messages


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[NotifySocket]:
    ns = NotifySocket(tmp_path / "notify.sock")
    yield ns
    ns.sock.close()


def start_agent(config: Path, env_extra: dict[str, str] | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, **(env_extra or {})}
    with open(config.parent / "agent.log", "a") as log:
        return subprocess.Popen(
            [*AGENT, "run", "--config", str(config)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )


def state_of(tmp_path: Path) -> dict[str, object]:
    data = json.loads((tmp_path / "state" / "state.json").read_text())
    assert isinstance(data, dict)
    return data


def worker_pid(tmp_path: Path) -> int | None:
    try:
        comps = state_of(tmp_path)["components"]
    except (OSError, ValueError):
        return None
    assert isinstance(comps, list)
    pid = comps[0].get("pid") if comps and comps[0].get("phase") == "running" else None
    return int(pid) if pid else None


def test_restarted_agent_adopts_the_running_worker(tmp_path: Path, notify: NotifySocket) -> None:
    config = write_config(tmp_path)
    env = {"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "200000"}
    agent = start_agent(config, env)
    try:
        wait_for(lambda: worker_pid(tmp_path))
        pid = worker_pid(tmp_path)
        assert pid is not None

        def told() -> bool:
            seen = notify.collect()  # every message so far
            running = any(m.startswith("STATUS=provisioner: xce-worker running pid") for m in seen)
            return "READY=1" in seen and running and seen.count("WATCHDOG=1") >= 2

        wait_for(told)
        messages = notify.collect()
        assert "READY=1" in messages
        assert any(m.startswith("STATUS=provisioner: xce-worker running pid") for m in messages)
        assert messages.count("WATCHDOG=1") >= 2
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=10)
        assert agent.returncode == 0
        assert alive(pid), "the worker must survive an agent restart"
        log = (tmp_path / "agent.log").read_text()
        assert "worker up" in log and "very-secret-token" not in log
        agent = start_agent(config, {"NOTIFY_SOCKET": str(notify.path)})
        wait_for(lambda: state_of(tmp_path)["lifecycle"] == "running")
        # Adopted before the agent says it runs: no second start can follow.
        wait_for(lambda: "[component_adopted]" in (tmp_path / "agent.log").read_text())
        assert worker_pid(tmp_path) == pid
        assert alive(pid)
        status = subprocess.run(
            [*AGENT, "status", "--config", str(config), "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        shown = json.loads(status.stdout)
        assert shown["components"][0]["pid"] == pid
        # Times as the API writes them: RFC 3339 in UTC, not seconds since the epoch.
        for stamp in (shown["updated_at"], shown["agent"]["started_at"]):
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp), stamp
        since = parse_time(shown["components"][0]["since"])
        assert since is not None and abs(since - time.time()) < 600
        assert "very-secret-token" not in status.stdout
        human = subprocess.run(
            [*AGENT, "status", "--config", str(config)], capture_output=True, text=True, check=True
        )
        assert "xce-worker" in human.stdout and "running" in human.stdout
        # Deliberate stop: components stop gracefully, then the agent exits 0.
        stop = subprocess.run(
            [*AGENT, "stop", "--config", str(config)], capture_output=True, text=True, timeout=30
        )
        assert stop.returncode == 0, stop.stderr
        agent.wait(timeout=10)
        assert agent.returncode == 0
        assert not alive(pid)
        assert state_of(tmp_path)["lifecycle"] == "stopped"
        assert "STOPPING=1" in notify.collect()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        pid_now = worker_pid(tmp_path)
        if pid_now:
            os.killpg(pid_now, signal.SIGKILL)


def test_killed_worker_is_restarted_by_the_agent(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    agent = start_agent(config)
    try:
        wait_for(lambda: worker_pid(tmp_path))
        first = worker_pid(tmp_path)
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: worker_pid(tmp_path) not in (None, first))
    finally:
        subprocess.run([*AGENT, "stop", "--config", str(config)], capture_output=True, timeout=30)
        agent.wait(timeout=10)


def test_second_agent_on_the_same_state_is_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    agent = start_agent(config)
    try:
        wait_for(lambda: worker_pid(tmp_path))
        second = subprocess.run(
            [*AGENT, "run", "--config", str(config)], capture_output=True, text=True, timeout=20
        )
        assert second.returncode == 1
        assert "another xce-agent is running" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        subprocess.run([*AGENT, "stop", "--config", str(config)], capture_output=True, timeout=30)
        agent.wait(timeout=10)


@pytest.mark.parametrize(
    "content",
    ["version: 1\nroles: {}\n", "\x00\x01binary", "", "- a list\n", "bad: [yaml\n"],
)
def test_config_error_exits_78_with_clear_lines(tmp_path: Path, content: str) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(content)
    result = subprocess.run(
        [*AGENT, "run", "--config", str(config)], capture_output=True, text=True, timeout=20
    )
    assert result.returncode == 78
    assert "Traceback" not in result.stderr
    assert result.stderr.strip()
    assert all(line.startswith("xce-agent: ") for line in result.stderr.splitlines())


def test_config_env_variable_and_validate(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    env = {**os.environ, "XCE_AGENT_CONFIG": str(config)}
    ok = subprocess.run([*AGENT, "validate"], capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and ok.stdout.strip().endswith(": ok")
    config.write_text(config.read_text().replace("stop_timeout: 5s", "stop_timeout: never"))
    bad = subprocess.run([*AGENT, "validate"], capture_output=True, text=True, env=env)
    assert bad.returncode == 78
    assert "roles.provisioner.components.xce-worker.stop_timeout: expected a duration" in bad.stdout


def test_script_started_through_its_shebang_is_adopted(tmp_path: Path) -> None:
    """/proc shows the interpreter first; adoption must not depend on the command line."""
    config = write_config(tmp_path)
    script = tmp_path / "worker-script"
    script.write_text(f"#!{sys.executable}\n{WORKER}")
    script.chmod(0o755)
    config.write_text(
        config.read_text().replace(f"[{sys.executable}, {tmp_path / 'worker.py'}]", f"[{script}]")
    )
    agent = start_agent(config)
    try:
        wait_for(lambda: worker_pid(tmp_path))
        pid = worker_pid(tmp_path)
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=10)
        agent = start_agent(config)
        wait_for(lambda: state_of(tmp_path)["lifecycle"] == "running")
        wait_for(lambda: "[component_adopted]" in (tmp_path / "agent.log").read_text())
        assert worker_pid(tmp_path) == pid
    finally:
        subprocess.run([*AGENT, "stop", "--config", str(config)], capture_output=True, timeout=30)
        agent.wait(timeout=10)


def test_stop_without_a_running_agent_stops_the_left_components(tmp_path: Path) -> None:
    """`systemctl stop` leaves the worker running by design; `xce-agent stop` ends it."""
    config = write_config(tmp_path)
    agent = start_agent(config)
    wait_for(lambda: worker_pid(tmp_path))
    pid = worker_pid(tmp_path)
    assert pid is not None
    agent.send_signal(signal.SIGTERM)
    agent.wait(timeout=10)
    assert alive(pid)
    stop = subprocess.run(
        [*AGENT, "stop", "--config", str(config)], capture_output=True, text=True, timeout=30
    )
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.strip() == "xce-agent: no agent was running; stopped xce-worker"
    wait_for(lambda: not alive(pid), timeout=5)
    comps = state_of(tmp_path)["components"]
    assert isinstance(comps, list) and comps[0]["phase"] == "stopped"
    again = subprocess.run(
        [*AGENT, "stop", "--config", str(config)], capture_output=True, text=True, timeout=30
    )
    assert "nothing to stop" in again.stdout
