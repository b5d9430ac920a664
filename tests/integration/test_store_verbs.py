"""`migrate` and `copy-store` given what an operator gets wrong: a file that is not a store is
one line and exit 1 (the file left as it was), and a SQLite store whose controller still
serves is not copied (its later writes would be missing from the shared store: two clusters,
each thinking it is the one). After each refusal the same command on the right input does
its work. A lease held when a store is copied stays its holder's for one TTL from the copy,
as across a restart of the single controller."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import requests

from tests.integration.controller_proc import ControllerProcess
from tests.integration.replica_set import CONFIG, call, join
from xce_controller.store.open import open_store
from xce_controller.store.postgres import PgStore
from xce_controller.store.sqlite import Store


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
    assert made.returncode == 0 and "a new store, schema version 1" in made.stdout, made.stderr
    again = xce_controller("migrate", "--db", str(store))
    assert "already at schema version 1" in again.stdout, "the same words as on PostgreSQL"
    copied = xce_controller("copy-store", "--from", str(store), "--to", pg_dsn)
    assert copied.returncode == 0 and "replay matches" in copied.stdout, copied.stderr


def test_copy_store_never_writes_to_a_file_that_is_not_a_store(tmp_path: Path, pg_dsn: str) -> None:
    empty = tmp_path / "empty.db"
    empty.touch(mode=0o644)
    other = tmp_path / "other.db"  # a SQLite database, of something else
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    for source, why in ((empty, "an empty file"), (other, "no table facts, hosts")):
        before = (source.read_bytes(), os.stat(source).st_mode, sorted(os.listdir(tmp_path)))
        r = xce_controller("copy-store", "--from", str(source), "--to", pg_dsn)
        one_line(r, f"--from: {source}: not a controller store", why)
        after = (source.read_bytes(), os.stat(source).st_mode, sorted(os.listdir(tmp_path)))
        assert after == before  # not a byte, not the mode, no file beside it
    missing = xce_controller("copy-store", "--from", str(tmp_path / "gone.db"), "--to", pg_dsn)
    assert missing.returncode == 2 and "no such database file" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert not (tmp_path / "gone.db").exists()
    assert facts(pg_dsn) == 0  # the target untouched: still empty, and taken after
    copied = xce_controller("copy-store", "--from", str(store_of(tmp_path)), "--to", pg_dsn)
    assert copied.returncode == 0 and "replay matches" in copied.stdout, copied.stderr


def test_copy_store_leaves_a_store_byte_for_byte(tmp_path: Path, pg_dsn: str) -> None:
    store = store_of(tmp_path)
    before = (store.read_bytes(), os.stat(store).st_mode, sorted(os.listdir(tmp_path)))
    copied = xce_controller("copy-store", "--from", str(store), "--to", pg_dsn)
    assert copied.returncode == 0 and "1 hosts" in copied.stdout, copied.stderr
    assert (store.read_bytes(), os.stat(store).st_mode, sorted(os.listdir(tmp_path))) == before


def store_of(root: Path) -> Path:
    """A stopped controller's store with one host expected."""
    workdir = root / "single"
    workdir.mkdir()
    ctl = ControllerProcess(workdir, CONFIG).start()
    try:
        body = {"instance_id": "i-1", "template": "default"}
        assert call(ctl.url, "POST", "/v1/expected", body).status_code == 201
    finally:
        ctl.stop()
    return ctl.db


def take(url: str, cred: str, host: str, lease: str, ttl: float) -> requests.Response:
    return call(
        url, "POST", f"/v1/leases/{lease}", {"host": host, "session": "s1", "ttl": ttl}, cred
    )


def stored_leases(dsn: str) -> tuple[dict[str, dict[str, object]], int, float]:
    store = PgStore(dsn)
    try:
        return {r["name"]: r for r in store.leases()}, store.lease_floor(), store.db_time()
    finally:
        store.close()


def test_a_lease_held_when_the_store_is_copied_stays_its_holders_for_one_ttl(
    tmp_path: Path, pg_dsn: str
) -> None:
    single = tmp_path / "single"
    single.mkdir()
    ctl = ControllerProcess(single, CONFIG).start()
    try:
        creds = {host: join(ctl.url, host) for host in ("sq0", "sq2")}
        assert take(ctl.url, creds["sq0"], "sq0", "locka", 600).status_code == 200
        assert take(ctl.url, creds["sq0"], "sq0", "lockb", 2).status_code == 200
    finally:
        ctl.stop()
    store = Store(ctl.db)  # a name forgotten at token 7: taken again, it starts at 8
    store.commit_leases([], [], forgotten=["old"], floor=7)
    store.close()
    _, _, before = stored_leases(pg_dsn)  # an empty database: its clock only
    copied = xce_controller("copy-store", "--from", str(ctl.db), "--to", pg_dsn)
    assert copied.returncode == 0 and "replay matches" in copied.stdout, copied.stderr
    rows, floor, after = stored_leases(pg_dsn)
    assert floor == 7
    for name, ttl in (("locka", 600), ("lockb", 2)):  # one TTL from the copy, never before
        assert before + ttl <= float(str(rows[name]["expires"])) <= after + ttl, rows[name]
    replicas = tmp_path / "replica"
    replicas.mkdir()
    replica = ControllerProcess(replicas, CONFIG, db=pg_dsn).start()
    try:
        refused = take(replica.url, creds["sq2"], "sq2", "locka", 600)
        assert refused.status_code == 409, refused.text
        assert (refused.json()["host"], refused.json()["token"]) == ("sq0", 1)
        assert refused.json()["expires_in"] > 590
        listed = {le["lease"]: le for le in call(replica.url, "GET", "/v1/leases").json()}
        assert (listed["locka"]["state"], listed["locka"]["host"]) == ("held", "sq0")
        renewed = take(replica.url, creds["sq0"], "sq0", "locka", 600)
        assert renewed.status_code == 200 and renewed.json()["token"] == 1, renewed.text
        while stored_leases(pg_dsn)[2] < float(str(rows["lockb"]["expires"])):
            time.sleep(0.1)  # lockb not renewed: it runs out as any lease does
        taken = take(replica.url, creds["sq2"], "sq2", "lockb", 2)
        assert taken.status_code == 200 and taken.json()["token"] == 2, taken.text
    finally:
        replica.stop()


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
