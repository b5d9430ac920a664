"""The `singleton:` key of a component: defaults, opt-out, and stop timeouts that must fit."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from xce_agent.config.agent import AgentConfig, load_config
from xce_agent.errors import ConfigError
from xce_agent.supervision.spec import SingletonSpec

PY = sys.executable


def config(
    tmp_path: Path, component: str, role: str = "provisioner", controller: bool = True
) -> str:
    head = "version: 1\n"
    if controller:
        head += "controller: {url: 'http://127.0.0.1:7870', token: t}\n"
    body = "".join(f"        {line}\n" for line in component.splitlines())
    return (
        f"{head}instance: {{id: i-1}}\nroles:\n  {role}:\n    components:\n      Prov:\n"
        f"        command: [{PY}, -c, pass]\n{body}state_directory: {tmp_path}/state\n"
    )


def load(tmp_path: Path, text: str) -> AgentConfig:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    return load_config(path, instance_data=tmp_path / "none.json")


def problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    return [re.sub(r" \([^()]* line \d+\)$", "", p) for p in info.value.problems]


def test_provisioner_role_is_a_singleton_by_default(tmp_path: Path) -> None:
    spec = load(tmp_path, config(tmp_path, "")).components[0]
    assert spec.singleton == SingletonSpec("prov", 15.0)
    assert spec.stop_timeout == pytest.approx(6.0)  # the longest that fits a 15s lease


def test_explicit_lease_and_ttl(tmp_path: Path) -> None:
    text = config(tmp_path, "singleton: {lease: cloud-api, ttl: 2s}\nstop_timeout: 500ms")
    spec = load(tmp_path, text).components[0]
    assert spec.singleton == SingletonSpec("cloud-api", 2.0) and spec.stop_timeout == 0.5


def test_opt_out_and_other_roles(tmp_path: Path) -> None:
    assert load(tmp_path, config(tmp_path, "singleton: false")).components[0].singleton is None
    spec = load(tmp_path, config(tmp_path, "singleton: true", role="worker")).components[0]
    assert spec.singleton == SingletonSpec("prov", 15.0)
    assert load(tmp_path, config(tmp_path, "", role="worker")).components[0].singleton is None


def test_without_a_controller_the_default_does_not_apply(tmp_path: Path) -> None:
    spec = load(tmp_path, config(tmp_path, "", controller=False)).components[0]
    assert spec.singleton is None and spec.stop_timeout == 10.0
    found = problems(tmp_path, config(tmp_path, "singleton: true", controller=False))
    assert found == [
        "roles.provisioner.components.Prov.singleton: expected a controller section "
        "(the lease of a singleton is held there), got no controller"
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "singleton: {ttl: 15s}\nstop_timeout: 10s",
            "roles.provisioner.components.Prov.stop_timeout: expected at most 6s for a "
            "singleton with ttl 15s",
        ),
        ("singleton: {ttl: 500ms}", "roles.provisioner.components.Prov.singleton.ttl: expected"),
        ("singleton: {ttl: 2h}", "roles.provisioner.components.Prov.singleton.ttl: expected a"),
        ("singleton: {lease: Big}", "roles.provisioner.components.Prov.singleton.lease: expected"),
        ("singleton: {lease: a/b}", "roles.provisioner.components.Prov.singleton.lease: expected"),
        ("singleton: {leas: x}", "roles.provisioner.components.Prov.singleton.leas: expected"),
        ("singleton: yes-please", "roles.provisioner.components.Prov.singleton: expected true"),
    ],
)
def test_bad_singletons_are_one_line_each(tmp_path: Path, extra: str, message: str) -> None:
    found = problems(tmp_path, config(tmp_path, extra))
    assert len(found) == 1 and found[0].startswith(message), found


def test_guard_and_fit() -> None:
    assert SingletonSpec("x", 15.0).guard == 1.5
    assert SingletonSpec("x", 1.0).guard == 0.25
    assert SingletonSpec("x", 2.0).max_stop_timeout == pytest.approx(0.75)


def test_two_singletons_of_one_host_may_not_share_a_lease(tmp_path: Path) -> None:
    # Prov's lease is "prov" by default; both would run at once under the host's one hold.
    text = config(tmp_path, "").replace(
        "state_directory:",
        f"      prov-b:\n        command: [{PY}, -c, pass]\n        singleton: {{lease: prov}}\n"
        "      other:\n        command: [/bin/true]\n        singleton: {lease: other}\n"
        "state_directory:",
    )
    assert problems(tmp_path, text) == [
        "roles.provisioner.components.prov-b.singleton: expected a lease no other component "
        "of the host uses, got lease 'prov', also Prov's"
    ]
    fine = text.replace("{lease: prov}", "{lease: prov-b}")
    assert [s.singleton.lease for s in load(tmp_path, fine).components if s.singleton] == [
        "prov",
        "prov-b",
        "other",
    ]


def test_a_bad_stop_timeout_of_a_singleton_is_one_problem(tmp_path: Path) -> None:
    # The bad value is reported once; the default it is replaced by (10s, longer than a 15s
    # lease allows) must not be reported a second time as too long for the lease.
    found = problems(tmp_path, config(tmp_path, "stop_timeout: soon"))
    assert len(found) == 1, found
    assert found[0].startswith(
        "roles.provisioner.components.Prov.stop_timeout: expected a duration"
    )
