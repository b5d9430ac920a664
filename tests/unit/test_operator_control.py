"""What a reload does (decided from the two configs alone); the socket it comes through."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from xce_agent.operator.verbs import plan_reload
from xce_agent.supervision.spec import ComponentSpec, ResourceLimits, RestartSpec


def spec(name: str, *command: str) -> ComponentSpec:
    return ComponentSpec(name, command or ("/bin/sleep", "60"))


def test_added_removed_restarted_and_updated() -> None:
    old = [spec("same"), spec("gone"), spec("cmd"), spec("env"), spec("lim"), spec("policy")]
    new = [
        spec("same"),
        spec("cmd", "/bin/sleep", "61"),
        replace(spec("env"), environment={"A": "1"}),
        replace(spec("lim"), limits=ResourceLimits(tasks_max=5)),
        replace(spec("policy"), stop_timeout=3.0, restart=RestartSpec(delay=2.0)),
        spec("new"),
    ]
    plan = plan_reload(old, new)
    assert [s.name for s in plan.added] == ["new"]
    assert plan.removed == ("gone",)
    assert [s.name for s in plan.restarted] == ["cmd", "env", "lim"]
    assert [s.name for s in plan.updated] == ["policy"]
    assert plan.describe() == (
        "removed gone, added new, restarted cmd, restarted env, restarted lim, updated policy"
    )


def test_nothing_changed() -> None:
    assert plan_reload([spec("a")], [spec("a")]).describe() == ""


def test_the_control_socket_works_under_a_deep_directory(tmp_path: Path) -> None:
    """sun_path holds 108 bytes; a state directory may be deeper than that."""
    import threading
    import time

    from xce_agent.operator.control import Answer, ControlServer, request
    from xce_agent.supervision.reactor import Reactor

    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    reactor = Reactor()
    server = ControlServer(deep / "control.sock", reactor, lambda c, n: Answer(True, f"{c} {n}"))
    answers: list[Answer] = []
    client = threading.Thread(
        target=lambda: answers.append(request(deep / "control.sock", "stop", "w"))
    )
    client.start()
    deadline = time.monotonic() + 10
    while client.is_alive() and time.monotonic() < deadline:
        reactor.run_once(max_wait=0.05)
    server.close()
    reactor.close()
    assert answers == [Answer(True, "stop w")]


def test_each_changed_component_and_key_has_its_own_line() -> None:
    from xce_agent.operator.verbs import reload_lines

    old = [spec("gone"), spec("cmd"), spec("policy"), spec("fatal")]
    new = [
        spec("cmd", "/bin/sleep", "61"),
        replace(spec("policy"), stop_timeout=3.0, restart=RestartSpec(delay=2.0)),
        replace(spec("fatal"), environment={"A": "1"}),
        spec("new"),
    ]
    plan = plan_reload(old, new)
    assert reload_lines(plan, old, ["controller"], idle=["fatal"]) == [
        "reload: gone: removed, stopping it",
        "reload: new: added",
        "reload: cmd: command changed: restarted now",
        "reload: fatal: environment changed: applies at its next start",
        "reload: policy: stop_timeout, restart changed: applied, its process kept",
        "reload: controller changed: restart the agent to apply",
    ]
    assert "changed fatal (not running: applies at its next start)" in plan.describe({"fatal"})
