"""Components with limits in systemd scopes: names, paths, argv and what is enforced."""

from __future__ import annotations

from pathlib import Path

import pytest

from xce_agent.supervision import scopes as sc
from xce_agent.supervision.cgroups import CgroupTree
from xce_agent.supervision.spec import ComponentSpec, ResourceLimits

LIMITS = ResourceLimits(memory_max=64 * 1024**2, cpu_weight=50, tasks_max=20)


def spec(limits: ResourceLimits = LIMITS, **kw: object) -> ComponentSpec:
    return ComponentSpec(name="xce-worker", command=("/usr/bin/worker", "-f"), limits=limits, **kw)  # type: ignore[arg-type]


def scopes(tmp_path: Path) -> sc.Scopes:
    return sc.Scopes(
        tmp_path, "1a2b3c4d", "xce-agent.service", "/usr/bin/systemd-run", "/usr/bin/setpriv"
    )


def test_the_scope_is_named_and_placed_from_the_state_directory_and_the_component() -> None:
    one = sc.Scopes(Path("/sys/fs/cgroup"), sc.tag_of(Path("/var/lib/xce-agent")))
    other = sc.Scopes(Path("/sys/fs/cgroup"), sc.tag_of(Path("/srv/other-agent")))
    assert one.unit("w") != other.unit("w")  # two agents on one host never share a scope
    assert one.unit("w") == f"xce-{one.tag}-w.scope"
    assert one.cgroup("w") == Path(f"/sys/fs/cgroup/xce.slice/xce-{one.tag}-w.scope")


def test_the_command_runs_the_component_in_place_with_its_limits(tmp_path: Path) -> None:
    argv = scopes(tmp_path).command(spec(stop_signal=2, stop_timeout=7.4), None, None, None)
    cut = argv.index("--")
    assert argv[cut + 1 :] == ["/usr/bin/worker", "-f"]  # no user switch: the command itself
    head = argv[:cut]
    assert head[:2] == ["/usr/bin/systemd-run", "--scope"]
    assert "--unit=xce-1a2b3c4d-xce-worker.scope" in head and "--slice=xce.slice" in head
    props = [head[i + 1] for i, word in enumerate(head) if word == "-p"]
    assert f"MemoryMax={64 * 1024**2}" in props
    assert {"CPUWeight=50", "TasksMax=20", "OOMPolicy=continue"} <= set(props)
    assert {"KillSignal=SIGINT", "TimeoutStopSec=7s", "Before=xce-agent.service"} <= set(props)


def test_only_the_limits_set_become_properties(tmp_path: Path) -> None:
    argv = scopes(tmp_path).command(spec(ResourceLimits(tasks_max=5)), None, None, None)
    assert "TasksMax=5" in argv
    assert not any(word.startswith(("MemoryMax=", "CPUWeight=")) for word in argv)


@pytest.mark.parametrize(
    ("uid", "gid", "groups", "switch"),
    [
        (1001, 1003, [1003, 1002], ["--reuid=1001", "--regid=1003", "--groups=1003,1002"]),
        (1001, 1003, [], ["--reuid=1001", "--regid=1003", "--clear-groups"]),
        (None, 1003, None, ["--regid=1003", "--keep-groups"]),
    ],
)
def test_the_user_and_every_group_are_switched_inside_the_scope(
    tmp_path: Path, uid: int | None, gid: int | None, groups: list[int] | None, switch: list[str]
) -> None:
    """systemd-run's own --uid sets no supplementary groups on systemd 252: setpriv does."""
    argv = scopes(tmp_path).command(spec(), uid, gid, groups)
    cut = argv.index("--")
    assert argv[cut + 1 : cut + 2 + len(switch)] == ["/usr/bin/setpriv", *switch]
    assert argv[-3:] == ["--", "/usr/bin/worker", "-f"]


def test_the_limits_a_scope_was_started_with_come_from_systemd_s_unit_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sc, "TRANSIENT", tmp_path)
    s = scopes(tmp_path)
    assert s.started_with("xce-worker") is None and not s.loaded("xce-worker")
    (tmp_path / s.unit("xce-worker")).write_text(
        "[Unit]\nDescription=x\n[Scope]\nSlice=xce.slice\nMemoryMax=67108864\nTasksMax=20\n"
    )
    assert s.loaded("xce-worker")
    assert s.started_with("xce-worker") == ResourceLimits(memory_max=64 * 1024**2, tasks_max=20)


def test_a_limit_without_its_controller_is_reported_not_enforced(tmp_path: Path) -> None:
    s = scopes(tmp_path)
    (tmp_path / "cgroup.controllers").write_text("cpu pids\n")
    assert s.unenforced(LIMITS) == ["memory_max"]
    (tmp_path / "cgroup.controllers").write_text("\n")
    assert s.unenforced(ResourceLimits(cpu_weight=5)) == ["cpu_weight"]
    tree = CgroupTree(tmp_path / "unit.service", scopes=s, mount=tmp_path)
    note = tree.limits_note(spec(ResourceLimits(cpu_weight=5)))
    assert note.startswith("cpu_weight NOT enforced") and s.unit("xce-worker") in note
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    assert tree.limits_note(spec()) == f"enforced by systemd scope {s.unit('xce-worker')}"
    assert CgroupTree(tmp_path).limits_note(spec()).startswith("NOT enforced")
    assert tree.limits_note(spec(ResourceLimits())) == ""


def test_a_component_s_cgroups_are_its_leaf_and_its_scope_and_nothing_else(
    tmp_path: Path,
) -> None:
    s = scopes(tmp_path)
    tree = CgroupTree(tmp_path / "system.slice/xce-agent.service", scopes=s, mount=tmp_path)
    assert tree.leaves("w") == [
        tmp_path / "system.slice/xce-agent.service/component-w",
        tmp_path / "xce.slice/xce-1a2b3c4d-w.scope",
    ]
    assert tree.scoped(spec()) and not tree.scoped(spec(ResourceLimits()))
    for path in (tree.leaf("w"), s.cgroup("v"), tmp_path / "xce.slice/xce-other-u.scope"):
        path.mkdir(parents=True)
    assert tree.names() == ["v", "w"]  # another agent's scopes are not ours
    assert tree.recorded_path(spec()) == "xce.slice/xce-1a2b3c4d-xce-worker.scope"
    assert tree.recorded_path(spec(ResourceLimits())) == "component-xce-worker"


def test_membership_is_the_exact_cgroup_not_a_path_that_ends_like_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = CgroupTree(tmp_path / "system.slice/xce-agent.service", mount=tmp_path)
    lines = {
        1: "0::/system.slice/xce-agent.service/component-w\n",
        2: "0::/elsewhere/component-w\n",
        3: "0::/system.slice/xce-agent.service\n",
    }
    real_read = Path.read_text

    def fake_read(self: Path, *args: object, **kw: object) -> str:
        parts = self.parts
        if len(parts) == 4 and parts[1] == "proc" and parts[3] == "cgroup":
            return lines[int(parts[2])]
        return real_read(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", fake_read)
    assert tree.contains("w", 1)
    assert not tree.contains("w", 2)
    assert not tree.contains("w", 3) and tree.cgroup_of(3) == tree.root


def test_an_older_systemd_gets_no_property_it_would_refuse(tmp_path: Path) -> None:
    old = sc.Scopes(tmp_path, "1a2b3c4d", "", "/usr/bin/systemd-run", "", version=247)
    argv = old.command(spec(), None, None, None)
    assert "OOMPolicy=continue" not in argv and not any(w.startswith("Before=") for w in argv)
    assert "OOMPolicy=continue" in scopes(tmp_path).command(spec(), None, None, None)


def test_without_systemd_run_the_scopes_left_are_still_the_components_never_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """systemd-run gone (or the agent started otherwise): the scopes an earlier agent
    started must still count as the components' cgroups. They were forgotten: the process
    in its scope was "gone, not in the component's cgroup" and a second copy started."""
    monkeypatch.setattr("shutil.which", lambda name: None)
    none, why = sc.detect(tmp_path, Path("/var/lib/xce-agent"), "xce-agent.service")
    assert none is None and why  # no slice: nothing was ever started in a scope here
    (tmp_path / sc.SLICE).mkdir()
    known, why = sc.detect(tmp_path, Path("/var/lib/xce-agent"), "xce-agent.service")
    assert why and known is not None and not known.starts
    assert known.tag == sc.tag_of(Path("/var/lib/xce-agent"))
    known.cgroup("w").mkdir()
    tree = CgroupTree(tmp_path / "system.slice/xce-agent.service", scopes=known, mount=tmp_path)
    assert tree.leaves("w")[1] == known.cgroup("w") and tree.names() == ["w"]
    assert not tree.scoped(spec())  # started in its leaf, limits said not enforced
    assert tree.limits_note(spec()).startswith("NOT enforced")
    assert tree.recorded_path(spec()) == "component-xce-worker"
