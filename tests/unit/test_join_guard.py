"""The join deadline on a running agent (join_guard.py) with a fake wall clock, a fake
monotonic clock and a recorded action: clock steps within a run, and a joined host's
credential."""

from __future__ import annotations

import sys
from pathlib import Path

from xce_agent.config.agent import load_config
from xce_agent.controller.credential import CredentialStore, HostCredential
from xce_agent.controller.join_guard import JoinGuard
from xce_agent.supervision.reactor import Reactor


class Clock:
    def __init__(self) -> None:
        self.mono = 100.0
        self.wall = 1_000_000.0

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float, wall_step: float = 0.0) -> None:
        self.mono += seconds
        self.wall += seconds + wall_step


class Run:
    def __init__(self) -> None:
        self.argvs: list[tuple[str, ...]] = []

    def __call__(self, argv: tuple[str, ...]) -> str:
        self.argvs.append(argv)
        return "ran"

    def close(self) -> None:
        pass


def guard(tmp_path: Path, clock: Clock) -> tuple[JoinGuard, Reactor, Run]:
    path = tmp_path / "agent.yaml"
    path.write_text(
        "version: 1\ncontroller: {url: 'http://127.0.0.1:9', token: t, timeout: 1s}\n"
        f"instance: {{id: i-1, host_name: h1, join_deadline: 60s, "
        f"on_join_timeout: [{sys.executable}, -c, pass]}}\n"
        f"roles:\n  worker:\n    components:\n      w: {{command: [{sys.executable}]}}\n"
        f"state_directory: {tmp_path}/state\n"
    )
    config = load_config(path)
    config.state_directory.mkdir()
    reactor = Reactor(clock)
    run = Run()
    g = JoinGuard(config, reactor, lambda: "unreachable", "h1", run, wall=lambda: clock.wall)
    return g, reactor, run


def ran(g: JoinGuard, run: Run) -> bool:
    if g.thread is not None:
        g.thread.join(30)
    return bool(run.argvs)


def test_a_wall_clock_stepped_back_within_a_run_does_not_put_the_deadline_off(
    tmp_path: Path,
) -> None:
    clock = Clock()
    g, reactor, run = guard(tmp_path, clock)
    g.start()
    assert g.metrics() == (1_000_060.0, False)
    clock.advance(30, wall_step=-3600)  # NTP steps the clock back an hour
    reactor.run_once(0)
    assert not ran(g, run)
    clock.advance(30)  # 60 s since the first start on the monotonic clock
    reactor.run_once(0)
    assert ran(g, run) and g.metrics() == (None, True)
    reactor.close()


def test_a_credential_for_this_instance_counts_as_joined(tmp_path: Path) -> None:
    clock = Clock()
    g, reactor, run = guard(tmp_path, clock)
    store = CredentialStore(g.config.state_directory)
    store.save(HostCredential("h1", "i-1", "http://127.0.0.1:9", 1, "s3cret"))
    g.start()
    assert g.metrics() == (None, False)
    clock.advance(3600)
    reactor.run_once(0)
    assert not ran(g, run)
    reactor.close()


def test_another_instances_credential_does_not(tmp_path: Path) -> None:
    clock = Clock()
    g, reactor, run = guard(tmp_path, clock)
    store = CredentialStore(g.config.state_directory)
    store.save(HostCredential("h1", "i-0", "http://127.0.0.1:9", 1, "s3cret"))  # the image's
    g.start()
    clock.advance(61)
    reactor.run_once(0)
    assert ran(g, run)
    reactor.close()
