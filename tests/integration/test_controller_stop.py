"""A stopping controller answers its open long-polls at once instead of waiting them out.

Debian 12's uvicorn has no bound on a graceful shutdown: without this a `systemctl restart`
took a whole watch timeout, long enough for hosts to miss their heartbeats and be taken for
lost. Newer uvicorn closes the connection after 2 s instead: either way the watch was not
answered, which is what this test tells apart.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import requests

from tests.integration.controller_proc import ControllerProcess
from tests.integration.helpers import wait_for


def test_sigterm_answers_open_watches_and_exits_promptly(tmp_path: Path) -> None:
    ctl = ControllerProcess(tmp_path).start()
    try:
        bearer = {"Authorization": f"Bearer {ctl.join_token()}"}
        joined = requests.post(
            ctl.url + "/v1/join", json={"host": "n1"}, headers=bearer, timeout=10
        )
        assert joined.status_code == 200
        since = joined.json()["version"]
        credential = {"Authorization": f"Bearer {joined.json()['credential']}"}
        answers: list[Any] = []

        def watch() -> None:
            url = f"{ctl.url}/v1/hosts/n1/watch?since={since}&timeout=60"
            try:
                answers.append(requests.get(url, headers=credential, timeout=90).status_code)
            except requests.RequestException as exc:
                answers.append(type(exc).__name__)

        thread = threading.Thread(target=watch)
        thread.start()
        assert ctl.proc is not None
        server = psutil.Process(ctl.proc.pid)
        # The watch has reached the controller once its connection is established there.
        # psutil < 6 (Debian 12's 5.9) calls it connections().
        connections = getattr(server, "net_connections", None) or server.connections
        wait_for(lambda: any(c.status == "ESTABLISHED" for c in connections("tcp")))
        assert answers == []
        started = time.monotonic()
        ctl.proc.send_signal(signal.SIGTERM)
        ctl.proc.wait(timeout=30)
        thread.join(timeout=30)
        assert answers == [200]
        assert time.monotonic() - started < 15  # far below the watch's 60 s
    finally:
        ctl.kill()
    wait_for(lambda: ctl.proc is not None and ctl.proc.poll() is not None, 5)
