"""Request bodies take JSON numbers only, whichever pydantic (1.10 or 2) validates them."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from xce_controller.http.schemas import HeartbeatBody, JobReportBody, JoinBody, SubmitBody

Body = Any


def _make(model: type[BaseModel], **fields: Any) -> Body:
    return model(**fields)


@pytest.mark.parametrize("slots", [True, "2", 3.5, float("inf"), float("nan")])
def test_slots_must_be_a_json_integer(slots: Any) -> None:
    with pytest.raises(ValidationError):
        _make(SubmitBody, command=["true"], slots=slots)


def test_an_integral_float_is_an_integer() -> None:
    assert _make(SubmitBody, command=["true"], slots=3.0).slots == 3
    assert _make(JobReportBody, exit_code=-1.0).exit_code == -1


def test_list_and_string_bounds_hold() -> None:
    with pytest.raises(ValidationError):
        _make(SubmitBody, command=[])
    with pytest.raises(ValidationError):
        _make(HeartbeatBody, components=[{"name": "w", "state": "x" * 33}])
    with pytest.raises(ValidationError):
        _make(HeartbeatBody, components=[{"name": "w", "state": "running", "pid": False}])
    ok = _make(HeartbeatBody, components=[{"name": "w", "state": "running", "pid": 7, "new": 1}])
    assert ok.components[0].pid == 7


@pytest.mark.parametrize(
    "fields",
    [{"host": 5}, {"host": "n1", "roles": ["worker", 5]}, {"host": "n1", "instance_id": 7}],
)
def test_strings_are_json_strings(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        _make(JoinBody, **fields)


@pytest.mark.parametrize(
    "fields",
    [
        {"host": "n1\n"},
        {"host": "n1", "instance_id": "i-1\n"},
        {"host": "n1", "template": "default\n"},
        {"host": "host:evil"},
        {"host": "n1", "instance_id": "i/1"},
        {"host": "n1", "addresses": ["a" * 65]},
        {"host": "n1", "resources": {f"r{i}": i for i in range(33)}},
        {"host": "n1", "resources": {"bad key": 1}},
        {"host": "n1", "resources": {"gpu": {"deep": [1]}}},
        {"host": "n1", "resources": {"gpu": True}},
        {"host": "n1", "resources": {"mem": float("nan")}},
        {"host": "n1", "resources": {"note": "x" * 257}},
    ],
)
def test_names_and_resources_are_bounded_on_either_pydantic(fields: dict[str, Any]) -> None:
    # pydantic 1 matches a pattern from the start only ("$" before a final newline passes):
    # the whole string must match there too.
    with pytest.raises(ValidationError):
        _make(JoinBody, **fields)


def test_resources_keep_their_json_types() -> None:
    body = _make(JoinBody, host="n1", resources={"gpu": 4, "mem": "192G", "ghz": 3.5})
    assert body.resources == {"gpu": 4, "mem": "192G", "ghz": 3.5}
    assert type(body.resources["gpu"]) is int and type(body.resources["mem"]) is str


def test_the_agents_heartbeat_of_a_worker_that_cannot_start_is_taken(tmp_path: Any) -> None:
    # A worker removed under a long path fails to start with the path in its last exit: 637
    # characters were refused (422) on every heartbeat, so the host was lost, not closed.
    from xce_agent.config.agent import load_config
    from xce_agent.controller.reports import Reports
    from xce_agent.state import AgentState, ComponentRecord

    config = tmp_path / "agent.yaml"
    config.write_text(
        "version: 1\ninstance: {id: i-1, host_name: h1}\n"
        "roles:\n  worker:\n    components:\n      w: {command: [/bin/true]}\n"
        f"state_directory: {tmp_path}/state\n"
    )
    why = "failed to start: [Errno 2] No such file or directory: '/" + "d" * 620 + "'"
    comp = ComponentRecord("w", "worker", "fatal", last_exit=why)
    reports = Reports(load_config(config), lambda: AgentState(components=(comp,)))
    body = _make(HeartbeatBody, **reports.heartbeat())
    (sent,) = body.components
    assert sent.state == "fatal" and sent.last_exit.startswith("failed to start: [Errno 2]")


def test_the_agent_says_its_version_at_join_and_in_every_heartbeat(tmp_path: Any) -> None:
    from xce_agent import __version__
    from xce_agent.config.agent import load_config
    from xce_agent.controller.reports import Reports
    from xce_agent.state import AgentState

    config = tmp_path / "agent.yaml"
    config.write_text(
        "version: 1\ninstance: {id: i-1, host_name: h1}\n"
        "roles:\n  worker:\n    components:\n      w: {command: [/bin/true]}\n"
        f"state_directory: {tmp_path}/state\n"
    )
    reports = Reports(load_config(config), AgentState)
    assert _make(JoinBody, **reports.join()).agent_version == __version__
    assert _make(HeartbeatBody, **reports.heartbeat()).agent_version == __version__
    assert _make(HeartbeatBody, protocol="1.1").agent_version == ""  # a 1.1 agent says nothing


def test_an_agent_of_another_major_protocol_is_refused_by_the_schema() -> None:
    from xce_protocol.protocol import PROTOCOL

    with pytest.raises(
        ValueError, match=f"agent speaks protocol '2.0', this controller {PROTOCOL}"
    ):
        _make(HeartbeatBody, protocol="2.0")
    assert _make(HeartbeatBody, protocol="1.0").protocol == "1.0"  # minors: not refused here
