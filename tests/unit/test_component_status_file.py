"""A component's own status lines (supervision/status_file.py): the agent hands a component
that runs as its own user a status file path in its state directory, and `xce-agent status`
shows what it wrote under the component, bounded and made printable."""

from __future__ import annotations

import os
from pathlib import Path

from xce_agent.operator.status import read_component_status, render_status
from xce_agent.state import AgentState, ComponentRecord
from xce_agent.supervision import status_file
from xce_agent.supervision.process import component_env
from xce_agent.supervision.spec import ComponentSpec

PROV = ComponentRecord(name="prov", role="provisioner", phase="running", pid=42)


def test_a_component_of_the_agents_user_gets_a_status_file_in_the_state_directory() -> None:
    env = component_env(ComponentSpec("prov", ("true",)), {}, owner="/var/lib/xce-agent")
    assert env[status_file.ENV] == "/var/lib/xce-agent/component-prov.status"
    as_other = component_env(
        ComponentSpec("prov", ("true",), user=str(os.getuid())), {}, owner="/x"
    )
    assert status_file.ENV not in as_other, "it could not write in the state directory"
    assert status_file.ENV not in component_env(ComponentSpec("prov", ("true",)), {})


def test_status_shows_what_the_component_wrote(tmp_path: Path) -> None:
    (tmp_path / "component-prov.status").write_text(
        "lease provisioner, token 7\nlast: node1: on issued\n"
    )
    own = read_component_status(tmp_path, ["prov", "other"])
    assert set(own) == {"prov"}
    view = render_status(AgentState(components=(PROV,)), own["prov"][0] + 3, own=own)
    assert "  its status, written " in view and "(3s ago)" in view
    assert "    lease provisioner, token 7" in view
    assert "    last: node1: on issued" in view


def test_a_hostile_status_file_is_bounded_and_printable(tmp_path: Path) -> None:
    path = tmp_path / "component-prov.status"
    path.write_bytes(b"\x1b[2Jcleared\xff\n" + b"x" * 500 + b"\n" + b"line\n" * 1000000)
    own = read_component_status(tmp_path, ["prov"])
    lines = own["prov"][1]
    assert lines[0].startswith("?[2Jcleared"), lines[0]
    assert len(lines[1]) == status_file.LINE_MAX
    assert len(lines) == status_file.MAX_LINES
    view = render_status(AgentState(components=(PROV,)), 0.0, own=own)
    assert "\x1b" not in view


def test_a_status_file_that_is_no_regular_file_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root's secret\n")
    (tmp_path / "component-prov.status").symlink_to(secret)
    os.mkfifo(tmp_path / "component-fifo.status")
    (tmp_path / "component-dir.status").mkdir()
    assert read_component_status(tmp_path, ["prov", "fifo", "dir"]) == {}
