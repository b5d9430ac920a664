"""The `cloud:` section and `notice_signal`: checked like the rest of the config."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from xce_agent.config.agent import load_config
from xce_agent.config.cloud import NO_CLOUD
from xce_agent.errors import ConfigError

PY = sys.executable


def config(tmp_path: Path, cloud: str = "", component: str = "") -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(
        "version: 1\ninstance:\n  id: i-1\nroles:\n  worker:\n    components:\n"
        f"      w:\n        command: {PY}\n{component}{cloud}"
    )
    return path


def instance_data(tmp_path: Path, cloud_name: object) -> Path:
    path = tmp_path / "instance-data.json"
    path.write_text(json.dumps({"v1": {"cloud_name": cloud_name, "instance_id": "i-1"}}))
    return path


def test_without_a_cloud_section_nothing_is_watched(tmp_path: Path) -> None:
    assert load_config(config(tmp_path)).cloud == NO_CLOUD


@pytest.mark.parametrize(
    ("name", "provider"),
    [
        ("aws", "aws"),
        ("GCE", "gce"),
        ("azure", "azure"),
        ("nocloud", "none"),
        ("openstack", "none"),
    ],
)
def test_auto_reads_cloud_init_cloud_name(tmp_path: Path, name: str, provider: str) -> None:
    data = instance_data(tmp_path, name)
    cfg = load_config(config(tmp_path, "cloud:\n  provider: auto\n"), instance_data=data)
    assert cfg.cloud.provider == provider and cfg.cloud.detected == name.lower()


def test_explicit_provider_url_and_interval(tmp_path: Path) -> None:
    text = "cloud:\n  provider: gce\n  metadata_url: http://127.0.0.1:8080/\n  poll_interval: 2s\n"
    cloud = load_config(config(tmp_path, text)).cloud
    assert (cloud.provider, cloud.metadata_url, cloud.poll_interval) == (
        "gce",
        "http://127.0.0.1:8080",
        2.0,
    )


def test_section_without_provider_means_auto(tmp_path: Path) -> None:
    data = instance_data(tmp_path, "aws")
    cloud = load_config(config(tmp_path, "cloud: {poll_interval: 1}\n"), instance_data=data).cloud
    assert cloud.provider == "aws" and cloud.poll_interval == 1.0


BAD = [
    (
        "cloud:\n  provider: ec2\n",
        "cloud.provider: expected one of auto, aws, gce, azure, none, got 'ec2' (F line 10)",
    ),
    (
        "cloud:\n  provider: aws\n  poll_interval: 0.01\n",
        "cloud.poll_interval: expected a duration from 0.2s to 168h (seconds, or like 500ms, 30s, "
        "5m, 1h), got 0.01 (F line 11)",
    ),
    (
        "cloud:\n  provider: aws\n  poll_interval: .nan\n",
        "cloud.poll_interval: expected a duration from 0.2s to 168h (seconds, or like 500ms, 30s, "
        "5m, 1h), got nan (F line 11)",
    ),
    (
        "cloud:\n  provider: aws\n  metadata_url: 169.254.169.254\n",
        "cloud.metadata_url: expected an http:// or https:// URL without query, "
        "got '169.254.169.254' (F line 11)",
    ),
    (
        "cloud:\n  provider: none\n  metadata_url: http://x\n",
        "cloud.metadata_url: expected no metadata_url with provider none, got 'http://x' "
        "(F line 11)",
    ),
    (
        "cloud:\n  provder: aws\n",
        "cloud.provder: expected one of the keys metadata_url, poll_interval, provider, "
        "got unknown key 'provder' (F line 10)",
    ),
    ("cloud: aws\n", "cloud: expected a mapping, got 'aws' (F line 9)"),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_bad_cloud_section_reports_exact_message(tmp_path: Path, text: str, message: str) -> None:
    path = config(tmp_path, text)
    data = tmp_path / "instance-data.json"
    with pytest.raises(ConfigError) as info:
        load_config(path, instance_data=data)
    expected = message.replace("F line", f"{path} line").replace("INSTANCE_DATA", str(data))
    assert expected in info.value.problems, info.value.problems


def test_auto_without_instance_data_watches_nothing_and_says_why(tmp_path: Path) -> None:
    data = tmp_path / "no-instance-data.json"
    cloud = load_config(config(tmp_path, "cloud: {provider: auto}\n"), instance_data=data).cloud
    assert cloud.provider == "none" and str(data) in cloud.note


def test_garbled_instance_data_is_an_error(tmp_path: Path) -> None:
    data = tmp_path / "instance-data.json"
    data.write_text("{not json")
    with pytest.raises(ConfigError, match="an unreadable file"):
        load_config(config(tmp_path, "cloud: {provider: auto}\n"), instance_data=data)


def test_cloud_name_missing_from_instance_data(tmp_path: Path) -> None:
    data = instance_data(tmp_path, None)
    with pytest.raises(ConfigError, match="no cloud_name in that file"):
        load_config(config(tmp_path, "cloud: {provider: auto}\n"), instance_data=data)


def test_notice_signal_sets_the_notice_file(tmp_path: Path) -> None:
    text = f"state_directory: {tmp_path}/state\n"
    cfg = load_config(config(tmp_path, text, "        notice_signal: SIGUSR1\n"))
    [spec] = cfg.components
    assert spec.notice_signal == signal.SIGUSR1
    assert spec.environment["XCE_NOTICE_FILE"] == f"{tmp_path}/state/notice-w.json"


def test_without_notice_signal_no_notice_file(tmp_path: Path) -> None:
    [spec] = load_config(config(tmp_path)).components
    assert spec.notice_signal is None and "XCE_NOTICE_FILE" not in spec.environment


def test_bad_notice_signal(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(config(tmp_path, "", "        notice_signal: SIGWAKEUP\n"))
    assert info.value.problems == [
        f"roles.worker.components.w.notice_signal: expected a signal name such as SIGTERM or "
        f"SIGINT, got 'SIGWAKEUP' ({tmp_path}/agent.yaml line 9)"
    ]


def test_rendered_user_data_without_cloud_notices_has_no_cloud_section() -> None:
    from xce_agent.operator.userdata import UserData, agent_config

    assert agent_config(UserData("http://c"))["cloud"] == {"provider": "auto"}
    assert "cloud" not in agent_config(UserData("http://c", cloud_provider="none"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"v1": "aws"}', "no cloud_name in that file"),
        ('{"v1": ["aws"]}', "no cloud_name in that file"),
        ("[1, 2]", "no cloud_name in that file"),
        ('{"v1": {"cloud_name": 7}}', "no cloud_name in that file"),
        ("[" * 100000 + "]" * 100000, "an unreadable file"),
    ],
    ids=["v1-string", "v1-list", "list", "number", "deep"],
)
def test_instance_data_of_the_wrong_shape_is_a_config_error_not_a_crash(
    tmp_path: Path, text: str, message: str
) -> None:
    data = tmp_path / "instance-data.json"
    data.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(config(tmp_path, "cloud: {provider: auto}\n"), instance_data=data)


def test_instance_data_that_is_a_fifo_does_not_hang_the_config(tmp_path: Path) -> None:
    data = tmp_path / "instance-data.json"
    os.mkfifo(data)
    with pytest.raises(ConfigError, match="an unreadable file"):
        load_config(config(tmp_path, "cloud: {provider: auto}\n"), instance_data=data)


def test_instance_id_auto_from_instance_data_of_the_wrong_shape_is_a_config_error(
    tmp_path: Path,
) -> None:
    data = tmp_path / "instance-data.json"
    data.write_text('{"v1": "i-1"}')
    text = config(tmp_path, "").read_text().replace("id: i-1", "id: auto")
    path = tmp_path / "auto.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="no instance_id in that file"):
        load_config(path, instance_data=data)
