"""A connection string libpq cannot read is one line and exit 1 from each verb that takes one
(`migrate --db`, `serve --db`, `copy-store --to`), never a traceback, and no piece of its
password is in that line. Nothing listens on the port: a string refused before connecting
needs no PostgreSQL, and one that is read fails to connect, also in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from xce_controller.store.base import StorageUnavailable
from xce_controller.store.pg_connection import with_tcp_bounds
from xce_controller.store.sqlite import Store

PORT = 5481  # in the range kept for this project's own servers, none started here
CONFIG = """\
version: 1
auth: {admin_token: adm1n-t0ken, join_token: j0in-t0ken}
templates:
  default: {slots: 1}
"""
UNREADABLE = [
    (f"host=127.0.0.1 port={PORT} dbnme=xce", 'invalid connection option "dbnme"'),
    (
        f"host=127.0.0.1 port={PORT} PASSWORD=s3cret dbname=xce",
        'invalid connection option "PASSWORD"',
    ),
    ("postgresql://[::1", 'matching "]" in IPv6 host address'),
    (f"host=127.0.0.1 port={PORT} password='s3cret", "unterminated quoted string"),
    (f"postgresql://127.0.0.1:{PORT}/xce?dbnme=xce", 'invalid URI query parameter: "dbnme"'),
    (f"host=127.0.0.1 port={PORT} password=S3 s3cret dbname=xce", 'missing "="'),
    (f"postgresql://xce:p%zzs3cret@127.0.0.1:{PORT}/xce", "invalid percent-encoded token"),
    (f"postgresql://xce:s3cret@s3cret@127.0.0.1:{PORT}/xce", 'write "@" as %40'),
    (f"postgresql://xce:a/s3cret@127.0.0.1:{PORT}/xce", 'write "@" as %40'),
]


def xce_controller(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xce_controller", *args], capture_output=True, text=True, timeout=60
    )


def one_line(r: subprocess.CompletedProcess[str], *words: str) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert all(w in lines[0] for w in words), lines[0]
    assert "s3cret" not in lines[0] and "cretPw" not in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(("db", "why"), UNREADABLE)
def test_migrate_with_an_unreadable_db_is_one_line(db: str, why: str) -> None:
    one_line(xce_controller("migrate", "--db", db), why)


@pytest.mark.parametrize(("db", "why"), UNREADABLE[:5])
def test_serve_with_an_unreadable_db_is_one_line(tmp_path: Path, db: str, why: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    args = ["serve", "--db", db, "--config", str(config), "--listen", "127.0.0.1:0"]
    one_line(xce_controller(*args), "cannot open the database", why)


@pytest.mark.parametrize(("db", "why"), UNREADABLE[:5])
def test_copy_store_to_an_unreadable_db_is_one_line(tmp_path: Path, db: str, why: str) -> None:
    source = tmp_path / "controller.db"
    Store(source).close()
    one_line(xce_controller("copy-store", "--from", str(source), "--to", db), why)


def test_a_quoted_password_is_hidden_in_the_connection_error() -> None:
    db = f"host=127.0.0.1 port={PORT} password='S3 cretPw' dbname=xce connect_timeout=2"
    line = one_line(xce_controller("migrate", "--db", db), "password=*** dbname=xce")
    assert "connection failed" in line or "Connection refused" in line, line


@pytest.mark.parametrize(("db", "why"), UNREADABLE)
def test_an_unreadable_string_is_storage_unavailable(db: str, why: str) -> None:
    with pytest.raises(StorageUnavailable) as caught:
        with_tcp_bounds(db)
    assert why in caught.value.cause and "s3cret" not in caught.value.cause
    assert caught.value.__cause__ is None  # libpq's words, password and all, not chained


def test_each_host_of_a_multi_host_string_is_named_when_none_can_be_used() -> None:
    db = (
        f"postgresql://xce:s3cret@127.0.0.1:{PORT},127.0.0.1:{PORT + 1}/xce"
        "?target_session_attrs=read-write&connect_timeout=2"
    )
    line = one_line(xce_controller("migrate", "--db", db), "no host could be used")
    assert f"127.0.0.1:{PORT}: " in line and f"127.0.0.1:{PORT + 1}: " in line, line
