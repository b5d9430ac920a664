"""render-user-data: the worker's user is created by cloud-init, and a config that could
never join (no controller URL, no usable join token) is refused in one line, exit 2 like
the command's other option errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.unit.test_error_exits import _one_line, _runner
from xce_agent.cli import main


def _token(tmp_path: Path, text: str = "a-join-token\n") -> str:
    path = tmp_path / "token"
    path.write_text(text)
    return str(path)


def _render(args: list[str]) -> object:
    return _runner().invoke(main, ["render-user-data", *args])


def test_the_worker_user_is_created_as_a_system_user_without_a_login_shell(
    tmp_path: Path,
) -> None:
    token = _token(tmp_path)
    args = ["--controller-url", "https://ctl", "--token-file", token]
    plain = _render(args)
    assert plain.exit_code == 0  # type: ignore[attr-defined]
    assert "users" not in yaml.safe_load(plain.stdout)  # type: ignore[attr-defined]
    out = _render([*args, "--worker-user", "xceworker"])
    assert out.exit_code == 0, out.stderr  # type: ignore[attr-defined]
    doc = yaml.safe_load(out.stdout)  # type: ignore[attr-defined]
    # "default" first: cloud-init drops the image's own user when users: leaves it out.
    assert doc["users"] == [
        "default",
        {
            "name": "xceworker",
            "gecos": "XCE worker",
            "system": True,
            "shell": "/usr/sbin/nologin",
            "lock_passwd": True,
        },
    ]
    assert list(doc)[:2] == ["users", "write_files"]
    config = yaml.safe_load(doc["write_files"][0]["content"])
    assert config["roles"]["worker"]["components"]["xce-worker"]["user"] == "xceworker"


@pytest.mark.parametrize(
    ("args", "option", "fixed"),
    [
        ([], "--controller-url", ["--controller-url", "https://ctl"]),
        (["--controller-url", " "], "--controller-url", ["--controller-url", "https://ctl"]),
        (
            ["--controller-url", "https://:8443"],
            "--controller-url",
            ["--controller-url", "https://ctl:8443"],
        ),
        (
            ["--controller-url", "https://u@ctl"],
            "--controller-url",
            ["--controller-url", "https://ctl"],
        ),
        (["--worker-user", "1000"], "--worker-user", ["--worker-user", "u1000"]),
        (["--worker-user", "root"], "--worker-user", ["--worker-user", "xce"]),
        (["--worker-user", "Bad;name"], "--worker-user", ["--worker-user", "badname"]),
    ],
)
def test_a_config_that_could_not_run_or_join_is_refused_in_one_line(
    tmp_path: Path, args: list[str], option: str, fixed: list[str]
) -> None:
    base = ["--controller-url", "https://ctl", "--token-file", _token(tmp_path)]
    refused = _render([*base, *args] if args else base[2:])
    assert refused.exit_code == 2, refused.output  # type: ignore[attr-defined]
    line = _one_line(refused, "xce-agent")
    assert line.startswith(f"xce-agent: {option}: expected"), line
    if args and args[-1].strip():
        assert repr(args[-1]) in line  # the value given, named
    assert refused.stdout == ""  # type: ignore[attr-defined]  # nothing half rendered
    rendered = _render([*base, *fixed])  # the same command, that one value fixed
    assert rendered.exit_code == 0 and rendered.stdout.startswith("#cloud-config\n")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (None, "the join token's file"),
        ("", "got an empty file"),
        ("\n\n", "got an empty file"),
        ("two words\n", "printable ASCII without spaces"),
        ("tok\x07en\n", "printable ASCII without spaces"),
    ],
)
def test_without_a_usable_join_token_nothing_is_rendered(
    tmp_path: Path, text: str | None, why: str
) -> None:
    args = ["--controller-url", "https://ctl"]
    if text is not None:
        args += ["--token-file", _token(tmp_path, text)]
    refused = _render(args)
    assert refused.exit_code == 2 and refused.stdout == ""  # type: ignore[attr-defined]
    line = _one_line(refused, "xce-agent")
    assert line.startswith("xce-agent: --token-file: expected") and why in line, line
    good = _render(["--controller-url", "https://ctl", "--token-file", _token(tmp_path)])
    assert good.exit_code == 0 and "/etc/xce/join-token" in good.stdout  # type: ignore[attr-defined]


def test_a_token_file_that_is_not_text_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_bytes(b"\xff\xfe\x00binary")
    refused = _render(["--controller-url", "https://ctl", "--token-file", str(path)])
    assert refused.exit_code == 2  # type: ignore[attr-defined]
    assert "--token-file: expected a join token" in _one_line(refused, "xce-agent")
