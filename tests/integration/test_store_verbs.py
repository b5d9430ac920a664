"""`migrate` and `copy-store` given what an operator gets wrong: a file that is not a store is
one line and exit 1, and a SQLite store whose controller still serves is not copied (its
later writes would be missing from the shared store: two clusters, each thinking it is
the one). After each refusal the same command on the right input does its work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.controller_proc import ControllerProcess
from tests.integration.replica_set import CONFIG, call
from xce_controller.store.open import open_store


def xce_controller(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xce_controller", *args], capture_output=True, text=True, timeout=60
    )


def one_line(r: subprocess.CompletedProcess[str], *words: str) -> None:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert all(word in lines[0] for word in words), lines


def facts(db: str) -> int:
    store = open_store(db)
    try:
        return len(store.facts())
    finally:
        store.close()


def test_a_file_that_is_not_a_store_is_one_line_for_migrate_and_copy_store(
    tmp_path: Path, pg_dsn: str
) -> None:
    junk = tmp_path / "notes.db"
    junk.write_text("not a database\n" * 100)
    one_line(xce_controller("migrate", "--db", str(junk)), str(junk), "not a database")
    one_line(
        xce_controller("copy-store", "--from", str(junk), "--to", pg_dsn),
        str(junk),
        "not a database",
    )
    assert junk.read_text() == "not a database\n" * 100  # left as it was
    store = tmp_path / "controller.db"
    made = xce_controller("migrate", "--db", str(store))
    assert made.returncode == 0, made.stderr
    copied = xce_controller("copy-store", "--from", str(store), "--to", pg_dsn)
    assert copied.returncode == 0 and "replay matches" in copied.stdout, copied.stderr


def test_copy_store_refuses_a_store_whose_controller_still_serves(
    tmp_path: Path, pg_dsn: str
) -> None:
    ctl = ControllerProcess(tmp_path, CONFIG).start()
    try:
        body = {"instance_id": "i-1", "template": "default"}
        assert call(ctl.url, "POST", "/v1/expected", body).status_code == 201
        r = xce_controller("copy-store", "--from", str(ctl.db), "--to", pg_dsn)
        one_line(r, str(ctl.db), "stop its controller")
        assert facts(pg_dsn) == 0  # nothing copied
        body = {"instance_id": "i-2", "template": "default"}
        assert call(ctl.url, "POST", "/v1/expected", body).status_code == 201  # still serving
    finally:
        ctl.stop()
    copied = xce_controller("copy-store", "--from", str(ctl.db), "--to", pg_dsn)
    assert copied.returncode == 0 and "2 hosts" in copied.stdout, copied.stderr
    assert facts(pg_dsn) == facts(str(ctl.db)) == 2  # the write after the refusal too
