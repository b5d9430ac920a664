"""`xce-controller backup`: a copy taken while the controller runs and writes holds every
acknowledged change before it, and a controller started on the copy serves them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import requests

from tests.integration.controller_proc import ControllerProcess

CLUSTER = "version: 1\ntemplates:\n  default: {slots: 1}\n"


def backup(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xce_controller", "backup", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def expect(ctl: ControllerProcess, instance: str) -> None:
    answer = requests.post(
        ctl.url + "/v1/expected",
        json={"instance_id": instance, "template": "default"},
        headers=ctl.admin_headers(),
        timeout=10,
    )
    assert answer.status_code == 201, answer.text


def expected(ctl: ControllerProcess) -> set[str]:
    answer = requests.get(ctl.url + "/v1/expected", headers=ctl.admin_headers(), timeout=10)
    return {record["instance_id"] for record in answer.json()}


def test_a_backup_taken_under_writes_restores_every_change_acknowledged_before_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    ctl = ControllerProcess(tmp_path / "a", CLUSTER).start()
    copy = tmp_path / "copy.db"
    try:
        for n in range(50):
            expect(ctl, f"i-{n}")
        stop = threading.Event()
        written: list[str] = []

        def keep_writing() -> None:  # the controller commits while the copy is taken
            n = 0
            while not stop.is_set():
                expect(ctl, f"w-{n}")
                written.append(f"w-{n}")
                n += 1

        writer = threading.Thread(target=keep_writing)
        writer.start()
        try:
            before = len(written)
            done = backup("--db", str(ctl.db), str(copy))
        finally:
            stop.set()
            writer.join(30)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"{ctl.db}: ") and f"copied to {copy}" in done.stdout
        assert copy.stat().st_mode & 0o777 == 0o600
    finally:
        ctl.stop()
    (tmp_path / "b").mkdir()
    shutil.copy(copy, tmp_path / "b" / "controller.db")
    restored = ControllerProcess(tmp_path / "b", CLUSTER).start()
    try:
        seen = expected(restored)
        assert {f"i-{n}" for n in range(50)} <= seen
        assert set(written[:before]) <= seen  # acknowledged before the copy began
        assert seen <= {f"i-{n}" for n in range(50)} | set(written)  # nothing made up
        expect(restored, "after")  # and it takes writes
        assert "after" in expected(restored)
    finally:
        restored.stop()


def test_a_backup_that_cannot_be_made_says_why_in_one_line(tmp_path: Path) -> None:
    missing = backup("--db", str(tmp_path / "none.db"), str(tmp_path / "copy.db"))
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1, missing.stderr
    assert "none.db: no database there" in missing.stderr
    assert not (tmp_path / "none.db").exists()  # not created by trying
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    broken = backup("--db", str(junk), str(tmp_path / "copy.db"))
    assert broken.returncode == 1 and "cannot back up" in broken.stderr, broken.stderr
    nowhere = backup("--db", str(junk), str(tmp_path / "no-dir" / "copy.db"))
    assert nowhere.returncode == 1 and "cannot write" in nowhere.stderr, nowhere.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.db"]  # no half copy left
