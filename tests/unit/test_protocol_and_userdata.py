"""Which answers the agent trusts, and the user-data it renders for a provisioner."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from xce_agent.config.agent import load_config
from xce_agent.operator.userdata import UserData, render
from xce_protocol.protocol import PROTOCOL, Identity, Outcome, classify, template_of

ME = Identity("node1", "i-1")
REFUSAL = {
    "error": "decommissioned",
    "host": "node1",
    "instance_id": "i-1",
    "reason": "r",
    "protocol": "1.0",
}


@pytest.mark.parametrize(
    ("status", "body", "outcome"),
    [
        (410, REFUSAL, Outcome.DECOMMISSIONED),
        (410, {**REFUSAL, "host": "node2"}, Outcome.RETRY),
        (410, {**REFUSAL, "instance_id": "i-2"}, Outcome.RETRY),
        (410, {**REFUSAL, "reason": None}, Outcome.RETRY),
        (410, {**REFUSAL, "error": "gone"}, Outcome.RETRY),
        (500, REFUSAL, Outcome.RETRY),
        (200, None, Outcome.RETRY),
        (200, [REFUSAL], Outcome.RETRY),
        (200, {"host": "node1", "state": "open", "protocol": "1.3", "new": 1}, Outcome.ACCEPTED),
        (200, {"host": "node2", "state": "open", "protocol": "1.0"}, Outcome.RETRY),
        (200, {"host": "node1", "state": "open"}, Outcome.RETRY),
        (410, {**REFUSAL, "protocol": "2.0"}, Outcome.INCOMPATIBLE),
        (410, {**REFUSAL, "protocol": "10.0"}, Outcome.INCOMPATIBLE),
        (410, {**REFUSAL, "protocol": 1}, Outcome.RETRY),
        (410, {**REFUSAL, "protocol": 1.0}, Outcome.RETRY),
        (410, {**REFUSAL, "protocol": ""}, Outcome.RETRY),
        (410, {k: v for k, v in REFUSAL.items() if k != "protocol"}, Outcome.RETRY),
        (301, REFUSAL, Outcome.RETRY),
        (308, REFUSAL, Outcome.RETRY),
        (403, {"error": "unmatched", "message": "no", "protocol": "1.0"}, Outcome.REFUSED),
        (403, {"error": "unmatched", "message": "no"}, Outcome.RETRY),
        (503, {"error": "busy"}, Outcome.RETRY),
    ],
)
def test_only_a_well_formed_refusal_for_this_host_is_a_decommission(
    status: int, body: Any, outcome: Outcome
) -> None:
    assert classify(status, body, ME).outcome is outcome


@pytest.mark.parametrize(
    ("status", "body", "honoured"),
    [
        (503, {"error": "busy"}, True),
        (429, {"protocol": "1.0", "error": "busy"}, True),
        (503, None, True),  # a proxy's busy page still means busy
        (500, {"protocol": "1.0", "error": "internal"}, False),
        (502, None, False),
        (200, None, False),  # garbage
        (404, None, False),  # someone's HTML page
        (200, {"host": "node1", "state": "open"}, False),  # no protocol version
        (410, {**REFUSAL, "host": "node2"}, False),
    ],
)
def test_retry_after_counts_only_on_a_busy_answer(status: int, body: Any, honoured: bool) -> None:
    answer = classify(status, body, ME, retry_after=300.0)
    assert answer.outcome is Outcome.RETRY
    assert answer.retry_after == (300.0 if honoured else None)


@pytest.mark.parametrize(
    ("name", "usable"),
    [
        ("gpu-large", True),
        ("x" * 255, True),
        ("", False),
        ("gpu\u0000large", False),
        ("gpu\nlarge", False),
        ("x" * 256, False),
        (7, False),
    ],
)
def test_a_template_the_worker_could_not_start_with_is_not_usable(name: Any, usable: bool) -> None:
    body = {"template": {"name": name, "slots": 1}}
    assert (template_of(body) is not None) is usable


def test_what_the_controller_says_reaches_logs_and_status_without_control_characters() -> None:
    body = {"protocol": "1.0", "error": "unmatched", "message": "no\n2026 INFO forged\x1b[2J"}
    assert classify(403, body, ME).detail == "HTTP 403 unmatched: no?2026 INFO forged?[2J"
    refusal = classify(410, {**REFUSAL, "reason": "gone\r\n\x07"}, ME)
    assert refusal.outcome is Outcome.DECOMMISSIONED and refusal.detail == "gone???"


def test_newer_major_version_is_reported_clearly() -> None:
    answer = classify(200, {"host": "node1", "state": "open", "protocol": "2.1"}, ME)
    assert answer.detail == f"controller speaks protocol 2.1, this agent {PROTOCOL}"


def test_rendered_user_data_writes_a_config_the_agent_accepts(tmp_path: Path) -> None:
    data = UserData(
        controller_url="https://ctl:8443",
        template="gpu",
        provider="aws",
        token="s3cret",
        worker_command=(sys.executable, "-c", "pass"),
    )
    text = render(data)
    assert text.startswith("#cloud-config\n")
    doc = yaml.safe_load(text)
    files = {f["path"]: f for f in doc["write_files"]}
    assert files["/etc/xce/join-token"]["permissions"] == "0600"
    assert "s3cret" not in files["/etc/xce/agent.yaml"]["content"]
    assert doc["runcmd"] == [["systemctl", "enable", "--now", "xce-agent.service"]]
    token = tmp_path / "join-token"
    token.write_text(files["/etc/xce/join-token"]["content"])
    config_text = files["/etc/xce/agent.yaml"]["content"].replace("/etc/xce/join-token", str(token))
    config_text = config_text.replace("/var/lib/xce-agent", str(tmp_path / "state"))
    (tmp_path / "agent.yaml").write_text(config_text)
    instance_data = tmp_path / "instance-data.json"
    instance_data.write_text(
        json.dumps({"v1": {"instance_id": "i-from-cloud-init", "cloud_name": "aws"}})
    )
    config = load_config(tmp_path / "agent.yaml", instance_data=instance_data)
    assert config.instance.id == "i-from-cloud-init" and config.instance.template == "gpu"
    assert config.cloud.provider == "aws" and config.cloud.detected == "aws"  # auto
    assert config.controller is not None and config.controller.token == "s3cret"
    assert config.components[0].decommission_exit_codes == frozenset({100})
