"""Config validation: every problem on one line, with path, expectation and line number."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

from xce_agent.config.agent import load_config
from xce_agent.errors import ConfigError
from xce_agent.supervision.spec import ProbeKind, RestartPolicy

PY = sys.executable

GOOD = f"""\
version: 1
controller:
  url: https://ctl.example:8443/
  token: s3cret
instance:
  id: i-0abc
  template: gpu-large
  provider: aws
roles:
  worker:
    components:
      xce-worker:
        command: [{PY}, -c, "pass"]
        environment: {{XCE_LOG: debug}}
        stop_signal: SIGINT
        stop_timeout: 30s
        restart:
          policy: on-failure
          initial_delay: 0
          delay: 500ms
          max_delay: 1m
          give_up: {{starts: 4, window: 2m}}
        liveness_probe:
          tcp: 127.0.0.1:7869
          period: 5
        decommission_exit_codes: [75]
state_directory: /var/lib/xce-agent
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    return path


def problems(tmp_path: Path, text: str) -> list[str]:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, instance_data=tmp_path / "instance-data.json")
    return [p.replace(str(path), "F") for p in info.value.problems]


def test_good_config_is_parsed_into_specs(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, GOOD))
    assert config.controller is not None
    assert config.controller.url == "https://ctl.example:8443"
    assert "s3cret" not in repr(config)
    assert config.instance.id == "i-0abc"
    assert config.roles == ("worker",)
    (comp,) = config.components
    assert comp.name == "xce-worker" and comp.role == "worker"
    assert comp.stop_signal == signal.SIGINT and comp.stop_timeout == 30.0
    assert comp.restart.policy is RestartPolicy.ON_FAILURE
    assert comp.restart.delay == 0.5 and comp.restart.max_delay == 60.0
    assert comp.restart.give_up_starts == 4 and comp.restart.give_up_window == 120.0
    assert comp.liveness is not None and comp.liveness.kind is ProbeKind.TCP
    assert comp.liveness.port == 7869 and comp.liveness.period == 5.0
    assert comp.decommission_exit_codes == frozenset({75})
    assert comp.environment == {"XCE_LOG": "debug"}


def minimal(extra_component: str = "", top: str = "") -> str:
    return (
        "version: 1\ninstance:\n  id: i-1\nroles:\n  worker:\n    components:\n"
        f"      w:\n        command: {PY}\n{extra_component}{top}"
    )


BAD = [
    (
        minimal(top="controler:\n  url: http://x\n"),
        "controler: expected one of the keys cloud, controller, instance, log_level, metrics, "
        "roles, state_directory, version, got unknown key 'controler' (F line 9)",
    ),
    (
        minimal("        restart:\n          policy: sometimes\n"),
        "roles.worker.components.w.restart.policy: expected one of always, on-failure, never, "
        "got 'sometimes' (F line 10)",
    ),
    (
        minimal("        restart:\n          give_up: {starts: three, window: 1m}\n"),
        "roles.worker.components.w.restart.give_up.starts: expected an integer from 1 to 10000, "
        "got 'three' (F line 10)",
    ),
    (
        minimal("        stop_timeout: soon\n"),
        "roles.worker.components.w.stop_timeout: expected a duration from 0s to 168h "
        "(seconds, or like 500ms, 30s, 5m, 1h), got 'soon' (F line 9)",
    ),
    (
        minimal("        stop_signal: SIGFOO\n"),
        "roles.worker.components.w.stop_signal: expected a signal name such as SIGTERM or "
        "SIGINT, got 'SIGFOO' (F line 9)",
    ),
    (
        minimal("        user: no-such-user-xyz\n"),
        "roles.worker.components.w.user: expected an existing user on this host, "
        "got 'no-such-user-xyz' (F line 9)",
    ),
    (
        minimal("        decommission_exit_codes: [75, 300]\n"),
        "roles.worker.components.w.decommission_exit_codes[1]: expected an exit code from 1 "
        "to 255, got 300 (F line 9)",
    ),
    (
        minimal("        liveness_probe:\n          tcp: localhost\n"),
        "roles.worker.components.w.liveness_probe.tcp: expected HOST:PORT with a port from 1 "
        "to 65535, got 'localhost' (F line 10)",
    ),
    (
        minimal("        liveness_probe:\n          period: 5\n"),
        "roles.worker.components.w.liveness_probe: expected exactly one of exec, tcp, http, "
        "got 0 of them (F line 10)",
    ),
    (
        minimal("        comand: x\n"),
        "roles.worker.components.w.comand: expected one of the keys command, "
        "decommission_exit_codes, environment, group, limits, liveness_probe, notice_signal, "
        "restart, singleton, stop_signal, stop_timeout, user, working_directory, got unknown "
        "key 'comand' (F line 9)",
    ),
    (
        "version: 1\ninstance:\n  id: i-1\nroles:\n  wrker:\n    components: {}\n",
        "roles.wrker: expected a known role (worker, provisioner, reverse-proxy), "
        "got unknown role 'wrker' (F line 5)",
    ),
    (
        "version: 2\ninstance:\n  id: i-1\nroles:\n  worker:\n    components: {}\n",
        "version: expected 1, got 2 (F line 1)",
    ),
    (
        "instance:\n  id: i-1\nroles:\n  worker:\n    components: {}\n",
        "version: expected an integer, got nothing (F line 1)",
    ),
    (
        "version: 1\ninstance:\n  id: i-1\nroles:\n  worker:\n    components:\n"
        "      w:\n        command: /no/such/program\n",
        "roles.worker.components.w.command: expected an executable program as the first word, "
        "got '/no/such/program', which is not an executable found on PATH (F line 8)",
    ),
    (
        minimal(top="controller:\n  url: ftp://x\n"),
        "controller.url: expected an http:// or https:// URL, got 'ftp://x' (F line 10)",
    ),
    (
        minimal(top="controller:\n  url: http://x\n  token: a\n  token_file: /etc/hostname\n"),
        "controller.token_file: expected either token or token_file, not both, got both "
        "(F line 12)",
    ),
    (
        minimal(top="state_directory: relative/dir\n"),
        "state_directory: expected an absolute path, got 'relative/dir' (F line 9)",
    ),
    (
        minimal("        restart:\n          delay: 10s\n          max_delay: 1s\n"),
        "roles.worker.components.w.restart.max_delay: expected a duration >= initial_delay "
        "and delay, got '1s' (F line 11)",
    ),
    (
        minimal("        restart:\n          policy: always\n          policy: never\n"),
        "F: duplicate key 'policy' (line 11)",
    ),
    (
        minimal(top="log_level: loud\n"),
        "log_level: expected one of debug, info, warning, error, got 'loud' (F line 9)",
    ),
    (
        "version: 1\ninstance:\n  id: auto\nroles:\n  worker:\n    components: {}\n",
        "instance.id: expected v1.instance_id in cloud-init's INSTANCE_DATA (id: auto), got no "
        "such file (has cloud-init run?) (F line 3)",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_bad_config_reports_exact_message(tmp_path: Path, text: str, message: str) -> None:
    found = problems(tmp_path, text)
    expected = message.replace("INSTANCE_DATA", str(tmp_path / "instance-data.json"))
    assert expected in found, found


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = minimal("        stop_timeout: soon\n        stop_signal: nope\n", "log_level: loud\n")
    assert len(problems(tmp_path, text)) == 3


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "F: expected a YAML mapping, got an empty file"),
        (b"   \n\n", "F: expected a YAML mapping, got an empty file"),
        (b"- a\n- b\n", "F: expected a YAML mapping at the top, got a list"),
        (b"just text\n", "F: expected a YAML mapping at the top, got the string 'just text'"),
        (b"a: [1, 2\n", "F: not valid YAML: expected ',' or ']', but got '<stream end>' "),
        (b"\x7fELF\x00\x01\x02", "F: expected a YAML text file, got binary data"),
        (b"\xff\xfe\xfa", "F: expected a UTF-8 YAML text file, got binary data"),
        (b"~\n", "F: expected a YAML mapping, got an empty document"),
    ],
)
def test_unusable_files_get_one_clear_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "agent.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (line,) = info.value.problems
    assert line.replace(str(path), "F").startswith(message)


def test_missing_and_directory_paths(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yaml")
    assert info.value.problems == [f"{tmp_path / 'nope.yaml'}: file not found"]
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert info.value.problems == [f"{tmp_path}: expected a file, got a directory"]


def test_instance_id_auto_reads_cloud_init_instance_data(tmp_path: Path) -> None:
    data = tmp_path / "instance-data.json"
    data.write_text(json.dumps({"v1": {"instance_id": "iid-nocloud-7"}}))
    path = write(tmp_path, minimal().replace("id: i-1", "id: auto"))
    assert load_config(path, instance_data=data).instance.id == "iid-nocloud-7"


def test_token_file_is_read_and_never_shown(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("tok-123\n")
    path = write(tmp_path, minimal(top=f"controller:\n  url: https://x\n  token_file: {token}\n"))
    config = load_config(path)
    assert config.controller is not None and config.controller.token == "tok-123"
    assert "tok-123" not in repr(config)


def test_a_client_certificate_needs_its_key_and_must_match_it(tmp_path: Path) -> None:
    from tests.certs import Authority

    ca = Authority(tmp_path / "ca")
    a, b = ca.issue("a"), ca.issue("b")

    def controller(**keys: Path) -> str:
        lines = "".join(f"  {k}: {v}\n" for k, v in keys.items())
        return minimal(top=f"controller:\n  url: https://x\n{lines}")

    config = load_config(
        write(tmp_path, controller(client_cert_file=a.cert, client_key_file=a.key))
    )
    assert config.controller is not None
    assert (config.controller.client_cert_file, config.controller.client_key_file) == (
        a.cert,
        a.key,
    )
    (alone,) = problems(tmp_path, controller(client_cert_file=a.cert))
    assert alone.startswith(
        "controller.client_key_file: expected a file path beside client_cert_file, got nothing"
    )
    (mismatch,) = problems(tmp_path, controller(client_cert_file=a.cert, client_key_file=b.key))
    assert mismatch.startswith("controller.client_cert_file: expected a PEM certificate and")
    assert "key values mismatch" in mismatch, mismatch
