"""The controller's command lines (xce-controller, xcecli): typed errors are one line each."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_error_exits import _one_line, _runner
from xce_controller.cli.controller import main as controller_main
from xce_controller.cli.xcecli import main as xcecli_main


def test_controller_bad_listen_is_a_usage_error() -> None:
    result = _runner().invoke(controller_main, ["serve", "--db", "x", "--listen", "nope"])
    assert result.exit_code == 2
    assert "--listen" in _one_line(result, "xce-controller")


def test_xcecli_unreachable_controller_is_exit_3() -> None:
    # Port 1 on loopback: nothing listens there, the connection is refused at once.
    result = _runner().invoke(xcecli_main, ["--url", "http://127.0.0.1:1", "hosts"])
    assert result.exit_code == 3
    assert "cannot reach" in _one_line(result, "xcecli")


def test_xcecli_unreadable_token_file_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    result = _runner().invoke(xcecli_main, ["--token-file", str(missing), "hosts"])
    assert result.exit_code == 2
    assert str(missing) in _one_line(result, "xcecli")
