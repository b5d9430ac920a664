"""Configs a hostile or careless operator writes: every one is refused with one line.

Each case once passed `validate` and then broke the agent (NaN timers, overflowing
durations, a recursion traceback, a 2.7 GB alias bomb, a FIFO that hangs the reader).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xce_agent.config.agent import load_config
from xce_agent.errors import ConfigError
from xce_agent.supervision.backoff import restart_delay
from xce_agent.supervision.spec import RestartSpec

PY = sys.executable
HEAD = (
    "version: 1\ninstance: {id: i-1}\nroles:\n  worker:\n    components:\n      w:\n"
    f"        command: [{PY}, -c, pass]\n"
)


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, instance_data=tmp_path / "none.json")
    return info.value.problems


BAD_NUMBERS = [
    ("        stop_timeout: .nan\n", "stop_timeout: expected a duration"),
    ("        stop_timeout: .inf\n", "stop_timeout: expected a duration"),
    ("        stop_timeout: 600h\n", "stop_timeout: expected a duration"),
    ("        stop_timeout: 2147484s\n", "stop_timeout: expected a duration"),
    ("        restart: {delay: .nan}\n", "restart.delay: expected a duration"),
    ("        restart: {multiplier: .nan}\n", "restart.multiplier: expected a number"),
    ("        restart: {multiplier: .inf}\n", "restart.multiplier: expected a number"),
    ("        restart: {multiplier: 1e308}\n", "restart.multiplier: expected a number"),
    ("        restart: {jitter: .nan}\n", "restart.jitter: expected a number"),
    (
        "        restart: {give_up: {starts: 3, window: .nan}}\n",
        "restart.give_up.window: expected a duration",
    ),
    (
        "        liveness_probe: {tcp: '127.0.0.1:1', period: .nan}\n",
        "liveness_probe.period: expected a duration",
    ),
    (
        "        liveness_probe: {tcp: '127.0.0.1:1', initial_delay: 600h}\n",
        "liveness_probe.initial_delay: expected a duration",
    ),
    ("        environment: {'A=B': x}\n", "environment.A=B: expected a variable name"),
    ('        environment: {A: "x\\0y"}\n', "environment.A: expected a string without NUL"),
    ("        environment: {XCE_AGENT_OWNER: x}\n", "environment.XCE_AGENT_OWNER: expected"),
    ("        environment: {xce_agent_component: x}\n", "environment.xce_agent_component:"),
    ('        working_directory: "/tmp\\0"\n', "working_directory: expected"),
    ('        user: "root\\0"\n', "user: expected"),
    ("        limits: {memory_max: 1K}\n", "limits.memory_max: expected a size"),
    ("        limits: {cpu_weight: 0}\n", "limits.cpu_weight: expected an integer"),
    ("        limits: {memory_max: .nan}\n", "limits.memory_max: expected a size"),
    ("        limits: {memory_max: -1G}\n", "limits.memory_max: expected a size"),
    ("        limits: {memory_max: 2T}\n", "limits.memory_max: expected a size"),
    ("        limits: {memory_max: 1.5G}\n", "limits.memory_max: expected a size"),
    ('        limits: {memory_max: "\u0664G"}\n', "limits.memory_max: expected a size"),  # 4G
    ("        limits: {tasks_max: .inf}\n", "limits.tasks_max: expected an integer"),
    ("        limits: {tasks_max: 4194305}\n", "tasks_max: expected an integer from 1 to 4194304,"),
    ("        limits: {cpu_weight: '50'}\n", "limits.cpu_weight: expected an integer"),
    ('        group: "99999999999"\n', "group: expected"),  # was an OverflowError traceback
    ('        user: "\u0660"\n', "user: expected"),  # ARABIC-INDIC DIGIT ZERO: uid 0, root
    ('        group: "\u0660"\n', "group: expected"),
    ("        liveness_probe: {http: 'http://h:99999/'}\n", "liveness_probe.http: expected"),
    ("        liveness_probe: {http: 'http://[::1/'}\n", "liveness_probe.http: expected"),
]


@pytest.mark.parametrize(("extra", "message"), BAD_NUMBERS, ids=[b for _, b in BAD_NUMBERS])
def test_unusable_numbers_and_names_are_refused(tmp_path: Path, extra: str, message: str) -> None:
    found = problems(tmp_path, HEAD + extra)
    assert len(found) == 1 and message in found[0], found


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("      w:\n", '      "w\\n":\n', "roles.worker.components.w\n: expected a component name"),
        ("{id: i-1}", '{id: i-1, host_name: "node1\\n"}', "instance.host_name: expected"),
    ],
    ids=["component", "host_name"],
)
def test_a_name_ending_in_a_newline_is_refused(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    """`$` matches before a final newline: "w\\n" passed as a component name. systemd-run
    escapes it (scope `xce-TAG-w\\x0a.scope`), so the scope's cgroup was not the one the agent
    derives from the name: its processes were not found as the component's."""
    found = problems(tmp_path, HEAD.replace(old, new))
    assert len(found) == 1 and message in found[0], found
    path = tmp_path / "agent.yaml"
    path.write_text(HEAD)  # the same file with a valid name loads
    assert load_config(path).components[0].name == "w"


def test_command_with_nul_is_refused(tmp_path: Path) -> None:
    text = HEAD.replace(f"[{PY}, -c, pass]", f'[{PY}, -c, "pass\\0"]')
    found = problems(tmp_path, text)
    assert len(found) == 1 and "command[2]: expected a non-empty string" in found[0], found


def test_limits_are_parsed(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(HEAD + "        limits: {memory_max: 512M, cpu_weight: 50, tasks_max: 64}\n")
    limits = load_config(path).components[0].limits
    assert (limits.memory_max, limits.cpu_weight, limits.tasks_max) == (512 * 1024**2, 50, 64)


def test_backoff_never_overflows() -> None:
    spec = RestartSpec(delay=1.0, max_delay=30.0, multiplier=100.0, jitter=0.0)
    assert restart_delay(spec, 1026, 0.5) == 30.0
    assert restart_delay(spec, 10**9, 0.5) == 30.0


HOSTILE = {
    "deep": "a: " + "[" * 300 + "]" * 300 + "\n",
    "deep-mapping": "a: " + "{b: " * 300 + "}" * 300 + "\n",
    "alias-key": (
        "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n*c : 1\n"
    ),
    "bomb": "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(6)
    ),
    "complex-key": "? [a, b]\n: 1\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_files_exit_78_with_one_line(tmp_path: Path, name: str) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(HOSTILE[name])
    assert path.stat().st_size < 2000
    for command in ("validate", "run"):
        out = subprocess.run(
            [PY, "-m", "xce_agent", command, "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 78, out
        text = (out.stdout + out.stderr).strip()
        assert len(text.splitlines()) == 1 and len(text) < 300, text
        assert "Traceback" not in text


def test_a_fifo_as_config_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "agent.yaml"
    os.mkfifo(fifo)
    for command in ("validate", "run"):
        out = subprocess.run(
            [PY, "-m", "xce_agent", command, "--config", str(fifo)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 78, out
        assert "expected a regular file, got a named pipe" in out.stdout + out.stderr


def test_controller_config_still_loads_with_anchors(tmp_path: Path) -> None:
    from xce_controller.core.config import load_cluster_config

    path = tmp_path / "cluster.yaml"
    path.write_text(
        "version: 1\ndefaults: {join_deadline: 10m}\n"
        "templates:\n  default: &t {slots: 2}\n  b: *t\n"
    )
    config = load_cluster_config(path)
    assert set(config.templates) == {"default", "b"}


def test_more_components_than_a_heartbeat_may_report_are_refused(tmp_path: Path) -> None:
    # 65 passed validate, and the controller refused every heartbeat of that host (422): it
    # was lost while it ran, and a crash loop it had could never close it.
    def text(n: int) -> str:
        comps = "".join(f"      c{i}: {{command: [{PY}, -c, pass]}}\n" for i in range(n - 1))
        return HEAD + comps

    (problem,) = problems(tmp_path, text(65))
    assert problem.startswith("roles: expected at most 64 components"), problem
    path = tmp_path / "ok.yaml"
    path.write_text(text(64))
    assert len(load_config(path, instance_data=tmp_path / "none.json").components) == 64


@pytest.mark.parametrize(
    ("value", "expected"),
    [("30s", 30.0), ("1s", 1.0), ("1h", 3600.0), ("2.5", 2.5)],
)
def test_the_request_read_timeout_is_a_duration(
    tmp_path: Path, value: str, expected: float
) -> None:
    from xce_controller.core.config import load_cluster_config

    path = tmp_path / "cluster.yaml"
    path.write_text(
        f"version: 1\nlimits: {{request_read_timeout: {value}}}\ntemplates: {{default: {{}}}}\n"
    )
    assert load_cluster_config(path).request_read_timeout == expected


@pytest.mark.parametrize("value", [".nan", ".inf", "0", "500ms", "2h", "-1s", "true", "[]"])
def test_a_bad_request_read_timeout_is_one_clear_error(tmp_path: Path, value: str) -> None:
    from xce_controller.core.config import load_cluster_config

    path = tmp_path / "cluster.yaml"
    path.write_text(
        f"version: 1\nlimits: {{request_read_timeout: {value}}}\ntemplates: {{default: {{}}}}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_cluster_config(path)
    assert "limits.request_read_timeout" in str(caught.value)
    assert "from 1s to 1h" in str(caught.value)
