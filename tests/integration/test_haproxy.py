"""Debian's HAProxy with examples/haproxy.cfg: an agent behind it keeps working when the
controller it was balanced to dies, and a change cut mid-request is sent to no other replica.

On the SQLite store two live controllers are two clusters, not replicas, so here the second
controller starts from a backup of the first's store after the first is killed (a standby
taking over), and HAProxy's health check takes the dead one out and the new one in. Live
replicas on PostgreSQL behind HAProxy are test_replica_topologies.py's. What this asserts is
the agent's side: behind one URL it carries on with its credential, does not join again,
keeps heartbeating, and takes HAProxy's own 503 (no replica up) for a failed contact, never
for a refusal.
"""

from __future__ import annotations

import http.server
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.agents import AgentProcess
from tests.integration.controller_proc import ControllerProcess, backup
from tests.integration.helpers import alive, wait_for
from tests.integration.test_replica_urls import CLUSTER, free_port, host, joins
from xce_protocol.times import parse_time

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "haproxy.cfg"
HAPROXY = shutil.which("haproxy") or (
    "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None
)

pytestmark = pytest.mark.skipif(
    HAPROXY is None, reason="haproxy is not installed (Debian: apt-get install haproxy)"
)


def local_config(front: int, backends: list[int]) -> str:
    """The example as it is, but on loopback ports, in the foreground, as this user."""
    out = []
    servers = iter(backends)
    for given in EXAMPLE.read_text().splitlines():
        word = given.split()[0] if given.split() else ""
        if word in ("user", "group", "daemon", "stats", "log"):
            continue  # root-only or system-wide settings
        if word == "option" and "httplog" in given:
            continue  # no log target here
        line = given
        if word == "bind":
            line = f"    bind 127.0.0.1:{front}"
        if word == "server":
            line = re.sub(r"\S+:\d+", f"127.0.0.1:{next(servers)}", given, count=1)
        out.append(line)
    return "\n".join(out) + "\n"


class Haproxy:
    def __init__(self, workdir: Path, backends: list[int]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "haproxy.cfg"
        self.config.write_text(local_config(self.port, backends))
        assert HAPROXY is not None
        check = subprocess.run(
            [HAPROXY, "-c", "-f", str(self.config)], capture_output=True, text=True, check=False
        )
        assert check.returncode == 0, check.stdout + check.stderr
        self.log = open(workdir / "haproxy.log", "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [HAPROXY, "-db", "-f", str(self.config)], stdout=self.log, stderr=subprocess.STDOUT
        )

        def listening() -> bool:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                return False
            return True

        wait_for(listening, timeout=20)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def dirs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    yield tmp_path / "a", tmp_path / "b"


def test_local_config_keeps_every_setting_of_the_example() -> None:
    text = local_config(8000, [8001, 8002])
    for setting in ("httpchk GET /healthz", "timeout server 330s", "retry-on", "redispatch"):
        assert setting in text
    assert "127.0.0.1:8001 check" in text and "127.0.0.1:8002 check" in text


def test_an_agent_behind_haproxy_carries_on_when_its_replica_dies(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    first = ControllerProcess(dirs[0], CLUSTER).start()
    second = ControllerProcess(dirs[1], CLUSTER)
    second.port = free_port()
    proxy = Haproxy(tmp_path, [first.port, second.port])
    agent = AgentProcess(tmp_path, proxy.url, "i-1", "n1", token="j0in").start()
    try:
        wait_for(lambda: host(first, "n1").get("state") == "open", timeout=30)
        wait_for(lambda: "checked in as n1" in agent.log(), timeout=30)
        worker = agent.worker_pid()
        assert worker is not None
        backup(first, second)
        first.kill()  # the replica behind HAProxy dies; its standby starts from the copy
        wait_for(lambda: "controller contact: unreachable" in agent.log(), timeout=30)
        second.start()
        incarnation = host(second, "n1")["incarnation"]

        def beats() -> float:
            return parse_time(host(second, "n1").get("last_seen")) or 0.0

        wait_for(lambda: beats() > 0, timeout=30)
        seen = beats()
        wait_for(lambda: beats() > seen, timeout=10)  # and it keeps heartbeating
        record = host(second, "n1")
        assert record["state"] == "open" and record["incarnation"] == incarnation
        assert agent.worker_pid() == worker and alive(worker)
        assert "joining again" not in agent.log() and "refused" not in agent.log()
        health = requests.get(proxy.url + "/healthz", timeout=5)
        assert health.status_code == 200 and health.json()["status"] == "ok"
    finally:
        agent.stop()
        proxy.close()
        second.stop()
        first.kill()
    assert joins(second.db, "i-1") == 1  # the copy's join, and no second one


class Cutter:
    """A replica that takes each request and closes without an answer (a crash mid-request),
    except the health check, which it passes. It counts what it took, by method and path."""

    def __init__(self) -> None:
        self.got: list[str] = []
        cutter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                if self.path == "/healthz":
                    self.send_response(200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")
                    return
                cutter.got.append(f"{self.command} {self.path}")
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

            do_GET = do_POST = _any

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_haproxy_sends_a_change_cut_mid_request_to_no_other_replica(tmp_path: Path) -> None:
    # A replica that took a change and died before answering may have made it: the example
    # config retries only reads then, or a job submit could be stored twice.
    cutters = [Cutter(), Cutter()]
    proxy = Haproxy(tmp_path, [c.port for c in cutters])
    try:
        change = requests.post(proxy.url + "/v1/jobs", json={"command": ["true"]}, timeout=10)
        assert change.status_code == 502, change.text
        assert sorted(cutters[0].got + cutters[1].got) == ["POST /v1/jobs"]  # taken once only
        read = requests.get(proxy.url + "/v1/jobs", timeout=10)
        assert read.status_code == 502, read.text
        assert [*cutters[0].got, *cutters[1].got].count("GET /v1/jobs") == 3  # retries 2
    finally:
        proxy.close()
        for cutter in cutters:
            cutter.close()
