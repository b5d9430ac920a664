"""Process identity: exact start ticks, executable and command line; forged records refused."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

from xce_agent.supervision.boot import boot_time
from xce_agent.supervision.identity import ProcessIdentity, mismatch, observe


def test_this_process_matches_itself_and_nothing_else() -> None:
    me = observe(os.getpid(), ("python",), "d")
    assert mismatch(me) == ""
    assert me.exe and me.cmdline and me.ticks > 0
    assert mismatch(replace(me, ticks=me.ticks + 1)) == "no process with that pid and start time"
    assert "runs" in mismatch(replace(me, exe="/usr/sbin/xce-worker"))
    assert mismatch(replace(me, cmdline=("other",))) == (
        "its command line differs from the recorded one"
    )
    assert mismatch(replace(me, boot_id="x", boot_time=1.0)) == "recorded in another boot"
    # Another view of the boot id (a container's), same boot time: still this boot.
    assert mismatch(replace(me, boot_id="x", boot_time=boot_time())) == ""


def test_a_dead_pid_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    record = observe(child.pid)
    child.wait()
    assert mismatch(record) == "no process with that pid and start time"


def test_json_round_trip_and_hostile_records() -> None:
    me = observe(os.getpid(), ("a", "b"), "digest", "component-w")
    assert ProcessIdentity.from_json(me.to_json()) == me
    data = me.to_json()
    for key, bad in (("pid", "1"), ("pid", -1), ("start_ticks", 1.5), ("cmdline", "x")):
        assert ProcessIdentity.from_json({**data, key: bad}) is None
    # Past what a pid or a signal can be: the os calls raise OverflowError, not OSError, and
    # such a record made every start of the agent fail (a traceback, exit 1).
    for key, bad in (("pid", 2**31), ("pid", 2**64), ("stop_signal", 10**6), ("stop_signal", 0)):
        assert ProcessIdentity.from_json({**data, key: bad}) is None, (key, bad)
    legacy = {"pid": os.getpid(), "cmdline": ["a"], "boot_id": me.boot_id}
    for key, bad in (("pid", 2**31), ("create_time", float("inf")), ("create_time", float("nan"))):
        assert ProcessIdentity.from_json({**legacy, "create_time": 1.0, key: bad}) is None
    assert ProcessIdentity.from_json({**data, "stop_timeout": float("nan")}) is None
    assert ProcessIdentity.from_json({**data, "stop_timeout": 1e300}) is None


def test_a_record_of_the_previous_format_is_read() -> None:
    me = observe(os.getpid())
    legacy = {
        "pid": me.pid,
        "create_time": me.started_epoch(),
        "cmdline": ["configured", "command"],
        "boot_id": me.boot_id,
    }
    old = ProcessIdentity.from_json(legacy)
    assert old is not None and old.ticks == me.ticks and old.command == ("configured", "command")
    assert mismatch(old) == ""  # pid, start time and boot only: an upgrade keeps the worker
