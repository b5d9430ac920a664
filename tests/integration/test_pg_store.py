"""The store behind its interface, on both backends; PostgreSQL's own duties (gapless
appends under concurrency, schema versions, the copy from SQLite)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest

from tests.pg_server import PgCluster
from xce_controller.core.config import load_cluster_config
from xce_controller.core.facts import apply
from xce_controller.core.model import Cluster, Fact
from xce_controller.service import Controller
from xce_controller.store.base import SchemaTooNew, StaleState, Store
from xce_controller.store.open import describe, is_postgres, open_store

CONFIG = """\
version: 1
auth: {admin_token: adm1n-t0ken, join_token: j0in-t0ken}
templates:
  default: {slots: 1}
"""


def expected(n: int) -> Fact:
    data = {"instance_id": f"i-{n}", "template": "default", "deadline": None}
    return Fact("expected", float(n), "admin", data)


def add(store: Store, cluster: Cluster, fact: Fact, after: int | None = None) -> None:
    touched = apply(cluster, fact)
    store.commit([fact], cluster, touched, set(), after)


def test_facts_rows_and_events_round_trip(store_db: str) -> None:
    store = open_store(store_db)
    try:
        cluster, _ = store.load()
        for n in range(1, 4):
            add(store, cluster, expected(n))
        loaded, _ = store.load()
        assert loaded.hosts == store.replay().hosts == cluster.hosts
        assert loaded.version == store.last_seq() == 3
        assert [seq for seq, _ in store.facts_after(1)] == [2, 3]
        about = store.events_after(0, {"i-2"}, 10)
        assert [(seq, f.data["instance_id"]) for seq, f in about] == [(2, "i-2")]
        assert [seq for seq, _ in store.events_after(1, None, 1)] == [2]
    finally:
        store.close()


def test_a_change_decided_on_an_old_log_is_refused_and_nothing_stored(store_db: str) -> None:
    store = open_store(store_db)
    try:
        cluster, _ = store.load()
        add(store, cluster, expected(1), after=0)
        with pytest.raises(StaleState):
            add(store, Cluster(), expected(2), after=0)  # decided before fact 1
        assert store.last_seq() == 1 and [f.data["instance_id"] for f in store.facts()] == ["i-1"]
        assert set(store.load()[0].hosts) == {"i-1"}
    finally:
        store.close()


def test_concurrent_appends_get_gapless_numbers_in_commit_order(pg_dsn: str) -> None:
    """The follower's cursor never passes a fact that commits later: sequence numbers taken
    at insert would let fact n+1 commit before n (reproduced before the append lock)."""
    writers, each = 6, 25
    stores = [open_store(pg_dsn) for _ in range(writers + 1)]
    follower, seen, errors = stores[0], [], []
    done = threading.Event()

    def write(store: Store, w: int) -> None:
        try:
            for n in range(each):
                store.commit([expected(w * 1000 + n)], Cluster(), set(), set())
        except Exception as exc:
            errors.append(exc)

    def follow() -> None:
        cursor = 0
        while not done.is_set() or cursor < writers * each:
            for seq, _ in follower.events_after(cursor, None, 500):
                seen.append(seq)
                cursor = seq
            if errors:
                return

    reader = threading.Thread(target=follow)
    reader.start()
    threads = [threading.Thread(target=write, args=(s, w)) for w, s in enumerate(stores[1:])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    reader.join(timeout=60)
    for store in stores:
        store.close()
    assert not errors
    assert seen == list(range(1, writers * each + 1))  # each once, none skipped


def test_a_controller_refuses_a_schema_newer_than_it_knows(
    pg: PgCluster, tmp_path: Path, store_db: str
) -> None:
    open_store(store_db).close()
    if is_postgres(store_db):
        schema = store_db.rsplit("search_path=", 1)[1]
        pg.primary.sql(f"UPDATE {schema}.schema_version SET version = 99", db="xcetests")  # noqa: S608
    else:
        import sqlite3

        db = sqlite3.connect(store_db)
        db.execute("PRAGMA user_version = 99")
        db.close()
    with pytest.raises(SchemaTooNew, match="schema version 99"):
        open_store(store_db)
    r = serve(tmp_path, store_db)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "schema version 99" in lines[0] and "newer" in lines[0], lines


def serve(tmp_path: Path, db: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    args = ["serve", "--db", db, "--config", str(config), "--listen", "127.0.0.1:0"]
    return xce_controller(*args)


def xce_controller(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xce_controller", *args], capture_output=True, text=True, timeout=60
    )


def test_migrate_brings_a_new_database_to_the_schema_once(pg_dsn: str) -> None:
    first = xce_controller("migrate", "--db", pg_dsn)
    assert first.returncode == 0 and "a new store, schema version 1" in first.stdout, first.stderr
    again = xce_controller("migrate", "--db", pg_dsn)
    assert again.returncode == 0 and "already at schema version 1" in again.stdout


def test_a_damaged_schema_record_is_one_line_that_says_so(tmp_path: Path, pg_dsn: str) -> None:
    assert xce_controller("migrate", "--db", pg_dsn).returncode == 0
    damages = (
        ("DELETE FROM schema_version", "schema_version holds 0 rows"),
        ("INSERT INTO schema_version VALUES (1), (5)", "schema_version holds 2 rows"),
        ("DROP TABLE schema_version", "a store's tables but no schema_version table"),
    )
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for sql, why in damages:
            conn.execute(sql)
            for r in (xce_controller("migrate", "--db", pg_dsn), serve(tmp_path, pg_dsn)):
                lines = r.stderr.strip().splitlines()
                assert r.returncode == 1 and len(lines) == 1 and why in lines[0], r.args
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('schema_version')").fetchone() == (None,)
        assert conn.execute("SELECT count(*) FROM facts").fetchone() == (0,), "nothing written"


def test_an_unreachable_database_is_one_line_and_exit_1(tmp_path: Path) -> None:
    r = serve(tmp_path, f"host={tmp_path} port=1 dbname=none connect_timeout=2")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot open the database" in lines[0], lines


def test_shared_store_needs_configured_tokens(tmp_path: Path, pg_dsn: str) -> None:
    r = xce_controller("serve", "--db", pg_dsn, "--listen", "127.0.0.1:0")
    assert r.returncode == 78
    assert "auth.admin_token: expected a configured token with a shared" in r.stderr


def test_copy_store_moves_a_cluster_and_checks_it_by_replay(tmp_path: Path, pg_dsn: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    source = tmp_path / "controller.db"
    ctl = Controller(load_cluster_config(config), open_store(str(source)))
    from xce_controller.core import lifecycle as lc

    ctl.commit(lc.expect(ctl.cluster, ctl.cfg, 1.0, "admin", "i-1", "default", "h1"))
    ctl.join(lc.JoinRequest(name="h2", token="j0in-t0ken"))
    ctl.store.close()
    r = xce_controller("copy-store", "--from", str(source), "--to", pg_dsn)
    assert r.returncode == 0, r.stderr
    assert "replay matches" in r.stdout and "2 hosts" in r.stdout
    copied, original = open_store(pg_dsn), open_store(str(source))
    try:
        assert copied.facts() == original.facts()
        assert copied.load()[0].hosts == copied.replay().hosts
    finally:
        copied.close()
        original.close()  # copy-store refuses a store another process has open
    again = xce_controller("copy-store", "--from", str(source), "--to", pg_dsn)
    assert again.returncode == 1 and "already holds a cluster" in again.stderr


def test_a_password_never_reaches_a_message() -> None:
    assert "s3cret" not in describe("postgresql://xce:s3cret@db/xce")
    assert "s3cret" not in describe("host=db password=s3cret dbname=xce")
    assert describe("/var/lib/xce/controller.db") == "/var/lib/xce/controller.db"
