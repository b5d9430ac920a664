"""The controller's command lines (xce-controller, xcecli): typed errors are one line each."""

from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.mark.parametrize(
    ("verb", "tool"), [("backup", "pg_dump -Fc"), ("restore", "pg_restore into an empty")]
)
@pytest.mark.parametrize("db", ["postgresql://xce:s3cret@127.0.0.1:1/xce", "host=/run/pg dbname=x"])
def test_backup_and_restore_of_postgresql_point_to_its_own_tools(
    tmp_path: Path, verb: str, tool: str, db: str
) -> None:
    other = tmp_path / "copy.db"
    result = _runner().invoke(controller_main, [verb, "--db", db, str(other)])
    assert result.exit_code == 1, result.output
    line = _one_line(result, "xce-controller")
    assert f"{verb} copies a SQLite store" in line and tool in line, line
    assert "s3cret" not in line and "docs/operations.md" in line
    assert not other.exists()


def test_backup_of_a_sqlite_file_still_works(tmp_path: Path) -> None:
    from xce_controller.store.sqlite import Store

    db, out = tmp_path / "c.db", tmp_path / "copy.db"
    Store(db).close()
    result = _runner().invoke(controller_main, ["backup", "--db", str(db), str(out)])
    assert result.exit_code == 0, result.output
    assert out.is_file() and result.stdout.startswith(f"{out}: backup of {db} (")
