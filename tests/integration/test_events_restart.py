"""The events stream across a controller restart: a stopping controller ends its followers'
streams cleanly (it does not wait for them, nor cut them off with a traceback), and
`xcecli events --follow` resumes after the restart with every event exactly once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import requests

from tests.integration.controller_proc import ControllerProcess
from tests.integration.helpers import wait_for
from tests.integration.test_observe_controller import ADMIN, CONFIG, READ


def expect(ctl: ControllerProcess, instance: str) -> None:
    body = {"instance_id": instance, "template": "default"}
    r = requests.post(ctl.url + "/v1/expected", json=body, headers=ADMIN, timeout=10)
    assert r.status_code == 201, r.text


def test_a_stopping_controller_ends_its_followers_streams_cleanly(tmp_path: Path) -> None:
    ctl = ControllerProcess(tmp_path, CONFIG).start()
    got: list[Any] = []
    try:

        def follow() -> None:
            url = ctl.url + "/v1/events?follow=true"
            try:
                with requests.get(url, headers=READ, stream=True, timeout=60) as r:
                    got.extend(json.loads(line) for line in r.iter_lines() if line)
                got.append("ended")
            except requests.RequestException as exc:
                got.append(type(exc).__name__)

        followers = [threading.Thread(target=follow) for _ in range(3)]
        for thread in followers:
            thread.start()
        expect(ctl, "i-1")
        wait_for(lambda: len(got) == 3)  # every follower is streaming (it got the event)
        assert ctl.proc is not None
        started = time.monotonic()
        ctl.proc.send_signal(signal.SIGTERM)
        ctl.proc.wait(timeout=30)
        for thread in followers:
            thread.join(timeout=30)
        assert time.monotonic() - started < 15
        assert got.count("ended") == 3, got  # a clean end of each answer, not a cut
        log = (tmp_path / "controller.log").read_text()
        assert "Traceback" not in log and "graceful shutdown exceeded" not in log, log
    finally:
        ctl.kill()


def test_xcecli_follow_prints_every_event_once_across_a_restart(tmp_path: Path) -> None:
    ctl = ControllerProcess(tmp_path, CONFIG).start()
    out = tmp_path / "events.out"
    args = ["--url", ctl.url, "--token", "r3ad", "events", "--follow", "--json"]
    with open(out, "wb") as sink, open(tmp_path / "events.err", "wb") as err:
        cli = subprocess.Popen(
            [sys.executable, "-m", "xce_controller.cli.xcecli", *args], stdout=sink, stderr=err
        )
    try:
        expect(ctl, "i-1")

        def seqs() -> list[int]:
            return [json.loads(line)["seq"] for line in out.read_text().splitlines()]

        wait_for(lambda: seqs() == [1])
        ctl.stop()
        ctl.start()  # the same database, config and port
        expect(ctl, "i-2")
        expect(ctl, "i-3")
        wait_for(lambda: len(seqs()) >= 3, 30)  # the client backs off before it reconnects
        expect(ctl, "i-4")
        wait_for(lambda: len(seqs()) >= 4, 30)
        assert seqs() == [1, 2, 3, 4]
        log = (tmp_path / "controller.log").read_text()
        assert "Traceback" not in log, log
    finally:
        cli.kill()
        cli.wait(timeout=10)
        ctl.kill()
