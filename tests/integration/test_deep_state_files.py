"""A file of the state directory nested deeper than Python's stack (written by a hostile
host, or damaged) is unreadable, not fatal: `json.loads` raised RecursionError, which no
reader caught, and the agent died at every start (a traceback, a restart loop), its
components unsupervised.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.integration.agents import AgentProcess
from tests.integration.fake_controller import HOST, INSTANCE, FakeController
from tests.integration.helpers import alive, wait_for

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("name", ["credential.json", "state.json", "template.json"])
def test_a_state_file_nested_past_the_stack_leaves_the_agent_running(
    tmp_path: Path, name: str
) -> None:
    server = FakeController(lambda x: None, ())
    agent = AgentProcess(tmp_path, server.url, INSTANCE, HOST, worker=SLEEPER)
    try:
        agent.start()
        wait_for(agent.worker_pid, 20)
        agent.term()
        path = agent.dir / "state" / name
        assert path.exists()
        path.write_text(DEEP)
        before = server.count("valid", "heartbeat")
        agent.start()
        wait_for(lambda: server.count("valid", "heartbeat") >= before + 2, 20)  # it runs
        assert agent.proc is not None and agent.proc.poll() is None, agent.log()[-2000:]
        assert "Traceback" not in agent.log()
        wait_for(agent.worker_pid, 15)
        worker = agent.worker_pid()
        server.set_phase("refuse")  # and still hears a refusal
        wait_for(lambda: worker is not None and not alive(worker), 15)
    finally:
        agent.stop()
        server.close()
