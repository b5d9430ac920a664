"""Every failure before the agent is ready prints one line and exits 1, within a bound.

With `metrics.listen` set, stopping the metrics server that never served used to wait for
ever: nothing printed, no exit code, systemd killing the agent at TimeoutStartSec.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import wait_for
from tests.integration.hostagent import HostAgent

SLEEPER = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
BOUND = 20.0  # seconds: far above a refused start (well under a second here), far below a hang


@pytest.fixture
def host(tmp_path: Path) -> Iterator[HostAgent]:
    agent = HostAgent(tmp_path)
    yield agent
    agent.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def _another_agent_recorded_live(host: HostAgent) -> Callable[[], object]:
    """The first agent killed and not reaped: its recorded pid and start time still live."""
    assert host.proc is not None
    first = host.proc
    first.kill()
    wait_for(lambda: _zombie(first.pid))
    return first.wait


def _control_socket_in_the_way(host: HostAgent) -> Callable[[], object]:
    host.detach()
    (host.state_dir / "control.sock").unlink(missing_ok=True)
    (host.state_dir / "control.sock" / "in-the-way").mkdir(parents=True)
    return lambda: None


STAGES = {
    "another-agent-live": (_another_agent_recorded_live, "another xce-agent is running"),
    "control-socket": (_control_socket_in_the_way, "control.sock"),
}


@pytest.mark.parametrize("metrics", [False, True], ids=["no-metrics-port", "metrics-port"])
@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_start_failure_prints_one_line_and_exits_1(
    host: HostAgent, stage: str, metrics: bool
) -> None:
    host.write({"worker": (SLEEPER, "stop_timeout: 2s")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    prepare, expected = STAGES[stage]
    after = prepare(host)
    try:
        if metrics:
            text = host.config.read_text() + f"metrics: {{listen: '127.0.0.1:{_free_port()}'}}\n"
            host.config.write_text(text)
        try:
            out = host.cli("run", timeout=BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the failed start did not exit within {BOUND:.0f}s")
        assert out.returncode == 1, out
        # Log lines come before it; the failure itself is one line, the last.
        said = [line for line in out.stderr.splitlines() if line.startswith("xce-agent: ")]
        assert len(said) == 1 and expected in said[0], out.stderr  # the input arrived
        assert out.stderr.strip().splitlines()[-1] == said[0]
        assert "Traceback" not in out.stderr
    finally:
        after()


@pytest.mark.parametrize("metrics", [False, True], ids=["no-metrics-port", "metrics-port"])
@pytest.mark.parametrize("stage", ["_contain", "_record_self"])
def test_an_error_while_containing_or_recording_itself_ends_the_start(
    host: HostAgent, stage: str, metrics: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither can be made to fail from outside without root tricks: the step is made to raise."""
    import threading

    from xce_agent.agent import Agent
    from xce_agent.config.agent import load_config
    from xce_agent.system.notify import SystemdNotifier

    host.write({"worker": (SLEEPER, "stop_timeout: 2s")})
    if metrics:
        text = host.config.read_text() + f"metrics: {{listen: '127.0.0.1:{_free_port()}'}}\n"
        host.config.write_text(text)

    def fail(self: Agent, *args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Agent, stage, fail)
    agent = Agent(load_config(host.config), SystemdNotifier())
    raised: list[BaseException] = []

    def run() -> None:
        try:
            agent.run()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive(), f"the failed start did not end within {BOUND:.0f}s"
    assert len(raised) == 1 and "No space left" in str(raised[0])  # the input arrived
    assert host.component("worker") == {}  # nothing was started
