"""The Agent shell carries out what the membership machine orders, in its order.

The pure machine answers a decommission with (SaveNow, StopRole worker): the tombstone must be
on disk before the worker's first stop signal, so an agent killed in between still knows the
host is gone. The machine's tests prove the order of the actions; this test proves the shell
keeps it. A slow store makes a skipped flush visible: without it the stop signal goes out while
the tombstone is still on its way to the disk.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from tests.integration.helpers import wait_for
from xce_agent.agent import Agent
from xce_agent.config.agent import load_config
from xce_agent.core import membership as ms
from xce_agent.state import AgentState, StateStore
from xce_agent.supervision.process import ProcessRunner

WORKER = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"


class SlowStore(StateStore):
    """Each save takes a while, as on a slow or loaded disk."""

    def save(self, state: AgentState) -> None:
        time.sleep(0.3)
        super().save(state)


class RecordingRunner(ProcessRunner):
    """Records, at each signal the supervisor sends, whether the tombstone is on disk."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__()
        self.reader = StateStore(state_dir)
        self.signals: list[tuple[int, bool]] = []

    def signal_group(self, pid: int, signum: int, name: str = "") -> None:
        saved = self.reader.read_only()
        self.signals.append((signum, saved is not None and saved.tombstone is not None))
        super().signal_group(pid, signum, name)


class Notes:
    def notify(self, message: str) -> None:
        pass


def make_agent(tmp_path: Path) -> tuple[Agent, RecordingRunner]:
    (tmp_path / "worker.py").write_text(WORKER)
    config = tmp_path / "agent.yaml"
    config.write_text(
        "version: 1\n"
        # Nothing listens on port 9: the link's contacts fail, the test plays the controller.
        "controller: {url: 'http://127.0.0.1:9', token: t0ken, timeout: 1s}\n"
        "instance: {id: i-1, template: t}\n"
        f"state_directory: {tmp_path / 'state'}\n"
        "roles:\n  worker:\n    components:\n      xce-worker:\n"
        f"        command: [{sys.executable}, {tmp_path / 'worker.py'}]\n"
        "        stop_timeout: 5s\n"
    )
    runner = RecordingRunner(tmp_path / "state")
    agent = Agent(load_config(config), Notes(), runner=runner)
    agent.store = SlowStore(agent.config.state_directory)
    return agent, runner


def test_the_tombstone_is_on_disk_before_the_workers_first_stop_signal(tmp_path: Path) -> None:
    a, runner = make_agent(tmp_path)
    failures: list[BaseException] = []

    def drive() -> None:  # the agent owns the main thread (its signal handlers)
        try:
            wait_for(lambda: a.state.lifecycle.value == "running", timeout=15)
            template = {"template": {"name": "t", "slots": 1}}
            a.post(ms.Joined("node1", "open", template))
            wait_for(lambda: a.supervisor.state("xce-worker").phase.value == "running", 15)
            assert runner.signals == []  # nothing stopped it so far
            a.post(ms.Decommissioned("i-1", "reclaimed"))
            wait_for(lambda: runner.signals, timeout=15)
            wait_for(lambda: a.supervisor.state("xce-worker").phase.value == "stopped", 15)
        except BaseException as exc:
            failures.append(exc)
        finally:
            a.reactor.call_soon_threadsafe(lambda: a.request_stop("test over"))

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    a.run()
    driver.join(timeout=30)
    assert not failures, failures
    first_signal, tombstone_on_disk = runner.signals[0]
    assert first_signal == 15
    assert tombstone_on_disk, "the worker was signalled before the tombstone was saved"
