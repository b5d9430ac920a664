"""The join deadline's action on real processes: a flood of output costs no memory, a command
that hangs or leaves children is killed with its group, and none outlives the agent."""

from __future__ import annotations

import resource
import sys
import threading
import time
from pathlib import Path

from tests.integration.helpers import group_members, wait_for
from xce_agent.controller.join_action import SHOWN, ActionRun

FLOOD = "import sys\nfor _ in range(768): sys.stdout.write('x' * (1 << 20))\nprint('end')"


def test_a_flood_of_output_is_read_as_it_comes_and_only_its_tail_kept() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    line = ActionRun(timeout=120)((sys.executable, "-c", FLOOD))
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert "exited with 0" in line and line.endswith("end"), line[:300]
    assert len(line) < SHOWN + 200
    assert grown < 128 * 1024, f"{grown} KiB kept for 768 MiB of output"


def test_a_command_that_hangs_is_killed_with_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pid"
    script = f"sleep 300 & echo $$ > {pids}; sleep 300"
    line = ActionRun(timeout=2)(("/bin/sh", "-c", script))
    assert "killed after 2s" in line, line
    wait_for(lambda: group_members(int(pids.read_text())) == [], 10)  # SIGKILL is not instant


def test_a_child_left_behind_is_killed_when_the_command_exits(tmp_path: Path) -> None:
    pids = tmp_path / "pid"
    started = time.monotonic()
    line = ActionRun(timeout=60)(("/bin/sh", "-c", f"sleep 300 & echo $$ > {pids}; echo hi"))
    assert line.endswith("exited with 0: hi"), line
    assert time.monotonic() - started < 30  # not the time limit: the child holds the pipe
    wait_for(lambda: group_members(int(pids.read_text())) == [], 10)  # SIGKILL is not instant


def test_a_command_still_running_goes_with_the_agent(tmp_path: Path) -> None:
    pids = tmp_path / "pid"
    run = ActionRun(timeout=600)
    lines: list[str] = []
    script = f"echo $$ > {pids}; sleep 300"
    thread = threading.Thread(target=lambda: lines.append(run(("/bin/sh", "-c", script))))
    thread.start()
    wait_for(lambda: pids.exists() and pids.read_text().strip(), 20)
    pgid = int(pids.read_text())
    assert group_members(pgid) != []  # it runs
    run.close()  # the agent stops
    thread.join(30)
    assert not thread.is_alive()
    wait_for(lambda: group_members(pgid) == [], 10)
    assert "killed" not in lines[0] and "exited with -9" in lines[0], lines
    assert run(("/bin/true",)).endswith("not run: the agent is stopping")
