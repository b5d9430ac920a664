"""`xce-controller backup` while a controller serves and commits; `restore` into a stopped one."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import requests

from tests.integration.controller_proc import ControllerProcess
from xce_controller.store.sqlite import Store

CONFIG = """\
version: 1
auth: {admin_token: adm1n, join_token: j0in}
templates:
  default: {slots: 1}
"""
ADMIN = {"Authorization": "Bearer adm1n"}


def verb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xce_controller", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def expect(ctl: ControllerProcess, instance: str) -> None:
    r = requests.post(
        ctl.url + "/v1/expected",
        json={"instance_id": instance, "template": "default"},
        headers=ADMIN,
        timeout=10,
    )
    assert r.status_code == 201, r.text


def facts_of(path: Path) -> list[tuple[str, float, str, dict[str, object]]]:
    store = Store(path)
    try:
        stored, _ = store.load()
        assert stored.hosts == store.replay().hosts and stored.jobs == store.replay().jobs
        return [(f.kind, f.at, f.by, f.data) for f in store.facts()]
    finally:
        store.close()


def test_a_backup_taken_while_serving_and_committing_is_a_consistent_moment(
    tmp_path: Path,
) -> None:
    ctl = ControllerProcess(tmp_path, CONFIG).start()
    acked: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            expect(ctl, f"i-{n}")
            acked.append(f"i-{n}")
            n += 1

    thread = threading.Thread(target=writer)
    thread.start()
    copies = []
    try:
        for k in range(3):
            before = list(acked)  # acknowledged before this backup started
            out = tmp_path / f"copy{k}.db"
            done = verb("backup", "--db", str(ctl.db), str(out))
            assert done.returncode == 0, done.stderr
            assert "replay equal" in done.stdout
            copies.append((out, before))
    finally:
        stop.set()
        thread.join(timeout=30)
        ctl.stop()
    live = facts_of(ctl.db)
    assert len(acked) > 20  # the controller was committing all along
    for out, before in copies:
        copied = facts_of(out)
        assert copied == live[: len(copied)]  # a prefix of the history: one moment
        store = Store(out)
        keys = {h.instance_id for h in store.load()[0].hosts.values()}
        store.close()
        assert set(before) <= keys  # nothing acknowledged before it is missing
    assert not list(tmp_path.glob("*.partial*"))


def test_restore_puts_a_backup_back_into_a_stopped_controller(tmp_path: Path) -> None:
    ctl = ControllerProcess(tmp_path, CONFIG).start()
    try:
        expect(ctl, "i-kept")
        copy = tmp_path / "copy.db"
        assert verb("backup", "--db", str(ctl.db), str(copy)).returncode == 0
        expect(ctl, "i-after")
        refused = verb("restore", "--db", str(ctl.db), str(copy))
        assert refused.returncode == 1
        assert "open in another process (stop its controller)" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        expect(ctl, "i-still")  # the refused restore touched nothing
    finally:
        ctl.stop()
    done = verb("restore", "--db", str(ctl.db), str(copy))
    assert done.returncode == 0, done.stderr
    assert "before-restore" in done.stdout
    ctl.start()
    try:
        hosts = requests.get(
            ctl.url + "/v1/hosts", params={"all": "true"}, headers=ADMIN, timeout=10
        ).json()
        assert {h["instance_id"] for h in hosts} == {"i-kept"}
        expect(ctl, "i-new")  # and it serves and commits on the restored store
    finally:
        ctl.stop()
    before = {f[3].get("instance_id") for f in facts_of(Path(f"{ctl.db}.before-restore"))}
    assert {"i-kept", "i-after", "i-still"} <= before  # what the restore replaced is kept


def test_a_bad_backup_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "controller.db"
    Store(db).close()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    original = db.read_bytes()
    done = verb("restore", "--db", str(db), str(junk))
    assert done.returncode == 1 and "not a readable store" in done.stderr
    assert "Traceback" not in done.stderr
    assert db.read_bytes() == original
    missing = verb("backup", "--db", str(tmp_path / "nope.db"), str(tmp_path / "out.db"))
    assert missing.returncode == 1 and "no such database file" in missing.stderr
    assert not (tmp_path / "nope.db").exists() and not (tmp_path / "out.db").exists()
