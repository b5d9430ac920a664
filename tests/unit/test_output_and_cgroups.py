"""Output handling (bounded reads, cut lines, rate limit) and the cgroup file operations."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from xce_agent.supervision.output import MAX_LINE, OutputPipe


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lines_pass_within_the_rate(tmp_path: Path) -> None:
    pipe = OutputPipe(tmp_path / "c.out", rate=10, burst=5, clock=Clock())
    batch = pipe.feed(b"one\ntwo\r\nthr")
    assert batch.lines == ("one", "two") and not batch.throttled
    assert pipe.feed(b"ee\n").lines == ("three",)
    assert list(pipe.tail) == ["one", "two", "three"]
    pipe.close()


def test_terminal_control_sequences_in_output_are_shown_escaped(tmp_path: Path) -> None:
    """A component (any user) printing escapes reached root's terminal raw through `status`
    and the log: a window title or clipboard write (OSC), a cleared screen, text hidden by
    carriage return and backspace."""
    pipe = OutputPipe(tmp_path / "c.out", rate=10, burst=5, clock=Clock())
    hostile = b"hi\x1b]52;c;cHduZWQ=\x07\x1b[2Jred\rX\x08\x7f\xc2\x9b\tok\r\n"
    batch = pipe.feed(hostile)
    assert batch.lines == ("hi\\x1b]52;c;cHduZWQ=\\x07\\x1b[2Jred\\x0dX\\x08\\x7f\\x9b\tok",)
    assert list(pipe.tail) == list(batch.lines)
    assert pipe.feed("caf\u00e9 \u2713\n".encode()).lines == ("caf\u00e9 \u2713",)
    pipe.close()


def test_a_flood_is_counted_and_reported_when_lines_flow_again(tmp_path: Path) -> None:
    clock = Clock()
    pipe = OutputPipe(tmp_path / "c.out", rate=10, burst=5, clock=clock)
    first = pipe.feed(b"y\n" * 20)
    assert first.lines == ("y",) * 5 and first.throttled
    assert pipe.feed(b"y\n" * 1000).lines == ()  # over the rate: counted, not split
    assert pipe.suppressed == 1015
    clock.now = 1.0  # ten tokens later
    batch = pipe.feed(b"after\n")
    assert batch.lines == ("[suppressed 1015 lines: over 10 lines/s]", "after")
    assert pipe.suppressed == 0 and pipe.suppressed_total == 1015
    pipe.close()


def test_a_line_without_newline_is_cut_and_memory_stays_bounded(tmp_path: Path) -> None:
    clock = Clock()
    pipe = OutputPipe(tmp_path / "c.out", clock=clock)
    out: list[str] = []
    throttled = 0
    for _ in range(200):  # 12.8 MB without a newline
        batch = pipe.feed(b"x" * 65536)
        out.extend(batch.lines)
        throttled += batch.throttled
        assert len(pipe._partial) <= MAX_LINE
    assert len(out) == 1 and out[0].endswith(" [line cut]")
    assert len(out[0]) == MAX_LINE + len(" [line cut]")
    # The discarded bytes count against the rate: the reader is told to pause.
    assert throttled >= 100
    clock.now = 60.0
    assert pipe.feed(b"rest of that line\nnext\n").lines == ("next",)
    pipe.close()


def test_one_wake_up_reads_at_most_the_budget(tmp_path: Path) -> None:
    pipe = OutputPipe(tmp_path / "c.out", clock=Clock())
    writer = pipe.child_fd()
    os.set_blocking(writer, False)
    written = 0
    with contextlib.suppress(BlockingIOError):
        while True:
            written += os.write(writer, b"z" * 1023 + b"\n")
    assert written >= 8 * 1024
    batch = pipe.read(budget=4096)
    assert len(batch.lines) == 4
    assert sum(len(pipe.read(budget=4096).lines) for _ in range(3)) == 12
    os.close(writer)
    pipe.close()


def test_limits_are_written_to_the_cgroup_files(tmp_path: Path) -> None:
    from xce_agent.supervision.cgroups import CgroupTree
    from xce_agent.supervision.spec import ResourceLimits

    tree = CgroupTree(tmp_path)
    tree.leaf("w").mkdir()
    missing = tree.apply_limits("w", ResourceLimits(memory_max=2**30, cpu_weight=50))
    assert missing == []
    assert (tmp_path / "component-w" / "memory.max").read_text() == f"{2**30}\n"
    assert (tmp_path / "component-w" / "cpu.weight").read_text() == "50\n"
    assert not (tmp_path / "component-w" / "pids.max").exists()
    gone = CgroupTree(tmp_path / "nowhere").apply_limits("w", ResourceLimits(tasks_max=5))
    assert gone == ["pids.max"]


def test_the_reactor_never_waits_longer_than_the_platform_allows() -> None:
    from xce_agent.supervision.reactor import MAX_WAIT, Reactor

    reactor = Reactor()
    try:
        reactor.call_later(600 * 3600.0, lambda: None)  # 600h: more than 2**31 ms
        assert reactor._timeout(None) == MAX_WAIT
        reactor.run_once(max_wait=0.0)  # no OverflowError
    finally:
        reactor.close()


def test_without_cgroup_kill_every_member_gets_sigkill(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    from xce_agent.supervision.cgroups import CgroupTree

    tree = CgroupTree(tmp_path)
    tree.leaf("x").mkdir()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (tree.leaf("x") / "cgroup.procs").write_text(f"{child.pid}\n")
    tree.kill("x")  # an older kernel: no cgroup.kill file
    assert child.wait(timeout=10) == -signal.SIGKILL
    assert not (tree.leaf("x") / "cgroup.kill").exists()


def test_controllers_are_enabled_only_where_no_process_lives_in_the_root(tmp_path: Path) -> None:
    from xce_agent.supervision.cgroups import CgroupTree
    from xce_agent.supervision.spec import ResourceLimits

    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    for may_enable in (False, True):
        tree = CgroupTree(tmp_path, may_enable=may_enable)
        tree.leaf("w").mkdir(exist_ok=True)
        (tmp_path / "cgroup.subtree_control").write_text("")
        tree.apply_limits("w", ResourceLimits(memory_max=2**30))
        enabled = (tmp_path / "cgroup.subtree_control").read_text()
        assert enabled == ("+memory\n" if may_enable else "")
        (tree.leaf("w") / "memory.max").unlink()
