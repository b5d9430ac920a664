"""The state file put back from an older copy under a running agent (a restored backup, an
edit): the next agent adopts only what the file names, so an older record made it start a
second worker beside the live one after a kill -9. The running agent now finds the file is
not the one it wrote and writes its state again (within its 5 s check period).

Runs without containment (process groups), where the recorded identity is all there is;
copies are counted by a mark in their command line, unique to the test.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

from tests.integration.agents import AgentProcess
from tests.integration.fake_controller import HOST, INSTANCE, FakeController
from tests.integration.helpers import wait_for


def copies(mark: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def recorded_pid(path: Path) -> int | None:
    try:
        return int(json.loads(path.read_text())["components"][0]["pid"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def test_an_older_state_file_put_back_is_written_again_so_no_second_worker(
    tmp_path: Path,
) -> None:
    mark = f"state-file-replaced-{uuid.uuid4().hex}"
    worker = [sys.executable, "-c", f"import time; time.sleep(600)  # {mark}"]
    server = FakeController(lambda x: None, ())
    agent = AgentProcess(tmp_path, server.url, INSTANCE, HOST, worker=worker)
    state = agent.dir / "state" / "state.json"
    try:
        agent.start()
        wait_for(agent.worker_pid, 20)
        first = agent.worker_pid()
        older = state.read_bytes()
        assert first is not None
        os.kill(first, signal.SIGKILL)  # restarted: the file now names the new pid
        wait_for(lambda: agent.worker_pid() not in (None, first), 15)
        live = agent.worker_pid()
        assert live is not None
        wait_for(lambda: recorded_pid(state) == live, 10)
        # Put back once the agent has nothing more to save (its delayed saves of the
        # restart's output are done), so only the check can write the file again.
        wait_for(lambda: time.time() - state.stat().st_mtime > 3, 20)
        put_back = state.with_name("put-back")
        put_back.write_bytes(older)
        os.replace(put_back, state)
        assert recorded_pid(state) == first  # the older copy is what the file holds now
        wait_for(lambda: "edited or replaced under the agent" in agent.log(), 15)
        wait_for(lambda: recorded_pid(state) == live, 5)  # written again by the agent
        assert agent.proc is not None
        agent.proc.kill()
        agent.proc.wait()
        agent.start()
        wait_for(lambda: "adopted running process" in agent.log(), 20)
        assert copies(mark) == [live]
    finally:
        agent.stop()
        server.close()
        for pid in copies(mark):
            os.kill(pid, signal.SIGKILL)
