"""Signals sent while the real agent starts, before its loop handles them: SIGHUP, SIGUSR1 (and
a real-time signal) never end it; a SIGHUP is acted on as a reload once it runs, a SIGUSR2 as
the stop it asks for. The start is held at its gate (system/start_signals.py): the latest
point before the loop's handlers are installed."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import wait_for
from tests.integration.test_agent_process import start_agent, state_of, worker_pid, write_config
from xce_agent.system import unused_signals
from xce_agent.system.start_signals import GATE_ENV


class Starting:
    """An agent held at its start's gate."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.gate = tmp_path / "gate"
        os.mkfifo(self.gate)
        self.agent = start_agent(write_config(tmp_path), {GATE_ENV: str(self.gate)})
        # Recorded as starting: past `run`'s first line, not yet at the loop's handlers.
        wait_for(self._recorded, timeout=30)

    def _recorded(self) -> bool:
        try:
            state = state_of(self.tmp)
        except (OSError, ValueError):
            return False
        agent = state.get("agent")
        pid = agent.get("pid") if isinstance(agent, dict) else None
        return state.get("lifecycle") == "starting" and pid == self.agent.pid

    def open_gate(self, within: float = 30) -> None:
        # Non-blocking: with no reader the open fails (ENXIO) instead of hanging. The agent
        # is recorded as starting a little before it opens the gate, so a live agent that
        # is not reading yet is waited for; a dead one fails the test.
        opened: list[int] = []

        def reader_there() -> bool:
            if self.agent.poll() is not None:
                raise AssertionError(f"the agent is gone: {self.log()}")
            try:
                opened.append(os.open(self.gate, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
                return False
            return True

        wait_for(reader_there, timeout=within)
        os.close(opened[0])

    def log(self) -> str:
        return (self.tmp / "agent.log").read_text()

    def close(self) -> None:
        if self.agent.poll() is None:
            with contextlib.suppress(AssertionError):  # at once: the gate is passed by now
                self.open_gate(within=0.1)
            self.agent.send_signal(signal.SIGUSR2)
            try:
                self.agent.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait()
        pid = worker_pid(self.tmp)
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def starting(tmp_path: Path) -> Iterator[Starting]:
    s = Starting(tmp_path)
    yield s
    s.close()


def test_sighup_and_sigusr1_while_starting_do_not_end_the_agent(starting: Starting) -> None:
    agent = starting.agent
    for signum in (signal.SIGHUP, signal.SIGUSR1, signal.SIGRTMIN + 3, signal.SIGHUP):
        agent.send_signal(signum)
    starting.open_gate()
    wait_for(lambda: agent.poll() is not None or state_of(starting.tmp)["lifecycle"] == "running")
    assert agent.poll() is None, starting.log()
    wait_for(lambda: worker_pid(starting.tmp) is not None, timeout=20)
    wait_for(lambda: "SIGUSR1 ignored" in starting.log())
    log = starting.log()
    assert log.count("SIGHUP arrived while starting: acting on it now") == 1, log  # one reload
    assert "reload" in log.split("SIGHUP arrived while starting", 1)[1], log
    assert f"{unused_signals.name(signal.SIGRTMIN + 3)} ignored" in log, log
    assert agent.poll() is None


def test_sigusr2_while_starting_stops_once_started(starting: Starting) -> None:
    agent = starting.agent
    agent.send_signal(signal.SIGUSR2)
    starting.open_gate()
    assert agent.wait(timeout=30) == 0, starting.log()
    assert "SIGUSR2 arrived while starting" in starting.log()
    assert state_of(starting.tmp)["lifecycle"] == "stopped"
