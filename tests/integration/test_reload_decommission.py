"""A reload never starts the worker of a decommissioned host again, not even while its
decommission stop is still under way (the worker taking its stop timeout): a changed command
restarts a component that runs or is stopping, and that restart bypassed the tombstone.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from tests.integration.agents import AgentProcess
from tests.integration.fake_controller import HOST, INSTANCE, FakeController
from tests.integration.helpers import wait_for
from tests.integration.hostagent import HostAgent

# Ignores its stop signal: the decommission stop lasts its whole stop timeout (5 s).
STUBBORN = """\
import pathlib, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
pathlib.Path(sys.argv[0] + ".ready").write_text("ready")
time.sleep(600)
"""


def _decommissioned_while_stopping(
    agent: AgentProcess, server: FakeController, script: Path
) -> int | None:
    """Start the agent, have the controller refuse the host, and return the worker's pid once
    its decommission stop is under way (the stubborn worker takes its stop timeout)."""
    agent.start()
    wait_for(agent.worker_pid, timeout=20)
    first = agent.worker_pid()
    wait_for(lambda: Path(f"{script}.ready").exists(), timeout=10)
    server.set_phase("refuse")
    wait_for(lambda: agent.state().get("tombstone"), timeout=20)
    wait_for(lambda: agent.worker().get("phase") == "stopping", timeout=10)
    return first


def test_a_reload_during_the_decommission_stop_does_not_start_the_worker(
    tmp_path: Path,
) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    server = FakeController(lambda x: None, ())
    agent = AgentProcess(tmp_path, server.url, INSTANCE, HOST, worker=[sys.executable, str(script)])
    try:
        first = _decommissioned_while_stopping(agent, server, script)
        # The config changes the worker's command while it is being stopped for good.
        agent.config.write_text(agent.config.read_text().replace(str(script), f"{script}, -v"))
        assert agent.proc is not None
        agent.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "config reloaded" in agent.log(), timeout=10)

        def restarted() -> bool:
            return "-> running" in agent.log().split("config reloaded", 1)[1]

        wait_for(lambda: agent.worker().get("phase") == "stopped" or restarted(), timeout=20)
        assert not restarted(), "the decommissioned host's worker was started again"
        assert agent.worker().get("pid") in (None, first)
    finally:
        agent.stop()
        server.close()


def test_an_agent_restarted_during_the_decommission_stop_with_a_changed_command(
    tmp_path: Path,
) -> None:
    """Killed -9 while its worker takes its stop timeout, the config changed meanwhile: the
    next agent adopts the worker and stops it, and never starts the changed command."""
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    server = FakeController(lambda x: None, ())
    agent = AgentProcess(tmp_path, server.url, INSTANCE, HOST, worker=[sys.executable, str(script)])
    try:
        first = _decommissioned_while_stopping(agent, server, script)
        assert agent.proc is not None
        agent.proc.kill()
        agent.proc.wait()
        agent.config.write_text(agent.config.read_text().replace(str(script), f"{script}, -v"))
        agent.start()
        wait_for(lambda: "adopted running process" in agent.log(), timeout=20)

        def restarted() -> bool:
            return "-> running" in agent.log().split("adopted running", 1)[1]

        wait_for(lambda: agent.worker().get("phase") == "stopped" or restarted(), timeout=20)
        assert not restarted(), "the decommissioned host's worker was started again"
        assert agent.worker().get("pid") in (None, first)
    finally:
        agent.stop()
        server.close()


def test_a_reload_during_a_planned_stop_does_not_start_the_component_again(
    tmp_path: Path,
) -> None:
    """SIGUSR2 (or `xce-agent stop`) stops every component, then the agent: a reload that
    changes a command while the component takes its stop timeout used to start it again,
    and the agent never ended its stop."""
    host = HostAgent(tmp_path)
    host.write({"side": (STUBBORN, "stop_timeout: 3s")})
    try:
        host.start()
        wait_for(lambda: host.running_pid("side"), timeout=20)
        wait_for((tmp_path / "side.py.ready").exists, timeout=10)
        host.signal(signal.SIGUSR2)
        wait_for(lambda: host.component("side").get("phase") == "stopping", timeout=10)
        host.config.write_text(host.config.read_text().replace("side.py]", "side.py, -v]"))
        host.signal(signal.SIGHUP)
        assert host.proc is not None
        assert host.proc.wait(timeout=30) == 0  # the stop ended, with the agent
        assert host.component("side").get("phase") == "stopped"
        assert "side: starting -> running" not in host.log().split("SIGUSR2", 1)[1]
    finally:
        host.close()
