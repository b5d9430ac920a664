"""Numbers a hostile controller or host can write that no float holds (JSON bounds no
number): a real agent takes them for what they are and goes on.

- A join answer whose `heartbeat_interval` has 400 digits: converting it raised
  OverflowError after the credential was kept and before the template was written, so the
  agent resumed with the credential and never started its worker until it was restarted.
- A join deadline record (`join.json`) whose first start has 400 digits: the agent died at
  start with a traceback (and systemd restarted it into the same death).
- A config with an integer of more than 4,300 digits sent by SIGHUP: the agent died.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from tests.integration.agents import AgentProcess
from tests.integration.fake_controller import ACCEPT, HOST, INSTANCE, Exchange, FakeController
from tests.integration.helpers import alive, wait_for

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
HUGE = "1" + "0" * 400


def huge_interval_join(x: Exchange) -> None:
    body = json.dumps(ACCEPT).replace('"heartbeat_interval": 1.0', f'"heartbeat_interval": {HUGE}')
    assert HUGE in body
    x.answer(200, body.encode())


def test_a_join_answer_with_a_huge_integer_interval_still_starts_the_worker(
    tmp_path: Path,
) -> None:
    server = FakeController(huge_interval_join, ("join",))
    agent = AgentProcess(tmp_path, server.url, INSTANCE, HOST, worker=SLEEPER)
    try:
        agent.start()
        wait_for(lambda: server.count("hostile", "join") >= 1, 20)  # the answer arrived
        wait_for(agent.worker_pid, 15)  # taken: clamped, the worker started from it
        pid = agent.worker_pid()
        assert "OverflowError" not in agent.log()
        server.set_phase("refuse")  # still listening: a valid refusal stops it
        wait_for(lambda: pid is not None and not alive(pid), 15)
    finally:
        agent.stop()
        server.close()


def test_a_join_record_with_a_huge_integer_time_counts_from_now(tmp_path: Path) -> None:
    server = FakeController(lambda x: None, ())
    server.set_phase("closed")  # no answer: the agent stays unjoined, its deadline pending
    agent = AgentProcess(tmp_path, server.url, INSTANCE, HOST, worker=SLEEPER)
    text = agent.config.read_text().replace(
        f"host_name: {HOST}}}", f"host_name: {HOST}, join_deadline: 1h, on_join_timeout: none}}"
    )
    agent.config.write_text(text)
    state = agent.dir / "state"
    state.mkdir(mode=0o700)
    record = {"instance_id": INSTANCE, "first_start": 0, "joined": False}
    (state / "join.json").write_text(
        json.dumps(record).replace('"first_start": 0', f'"first_start": {HUGE}')
    )
    try:
        agent.start()
        wait_for(lambda: server.count("closed", "join") >= 1, 20)  # it runs and tries to join
        assert agent.proc is not None and agent.proc.poll() is None, agent.log()[-2000:]
        assert "Traceback" not in agent.log()
        saved = json.loads((state / "join.json").read_text())
        assert isinstance(saved["first_start"], float), saved  # counted from now, rewritten
    finally:
        agent.stop()
        server.close()


def test_a_reload_of_a_config_with_a_huge_integer_leaves_the_agent_supervising(
    tmp_path: Path,
) -> None:
    # PyYAML's int() of more than 4,300 digits raised an unmarked ValueError: `validate`
    # ended with a traceback and SIGHUP ended the running agent, its worker unsupervised.
    server = FakeController(lambda x: None, ())
    agent = AgentProcess(tmp_path, server.url, INSTANCE, HOST, worker=SLEEPER)
    try:
        agent.start()
        wait_for(agent.worker_pid, 20)
        first = agent.worker_pid()
        good = agent.config.read_text()
        agent.config.write_text(good.replace("stop_timeout: 5s", f"stop_timeout: {'9' * 5000}"))
        assert agent.proc is not None
        agent.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "a value that cannot be read" in agent.log(), 10)  # it was read
        assert agent.proc.poll() is None, agent.log()[-2000:]
        assert first is not None
        os.kill(first, signal.SIGKILL)  # still supervised: the worker is started again
        wait_for(lambda: agent.worker_pid() not in (None, first), 15)
    finally:
        agent.stop()
        server.close()
