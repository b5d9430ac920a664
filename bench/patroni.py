"""A Patroni cluster on loopback for the HA soak: etcd, and PostgreSQL nodes under Patroni.

Debian's `etcd-server` (3.4) is Patroni's store and Debian's `patroni` manages Debian's
PostgreSQL 15; everything runs as the `postgres` user (initdb refuses root) in one temporary
directory, on 127.0.0.1 ports of its own. `kill_leader` kills the leader's Patroni and
postmaster with SIGKILL, as the loss of its machine would; `revive` starts that node again
from an empty data directory (a new replica cloned from the new leader).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import requests
import yaml

PG_BIN = Path("/usr/lib/postgresql/15/bin")
NEEDS = ("patroni", "etcd", "runuser")


def why_not() -> str:
    """ "" when this machine can run the cluster, else what it lacks (one line)."""
    missing = [tool for tool in NEEDS if shutil.which(tool) is None]
    if not (PG_BIN / "initdb").exists():
        missing.append("postgresql (15)")
    if missing:
        return "needs " + ", ".join(missing) + " (apt-get install patroni etcd-server postgresql)"
    if os.geteuid() != 0:
        return "needs root (it runs PostgreSQL and Patroni as the postgres user)"
    return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    out = log.open("ab")
    return subprocess.Popen(
        ["runuser", "-u", "postgres", "--", *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


class Node:
    """One PostgreSQL server under its Patroni."""

    def __init__(self, root: Path, name: str, etcd: str) -> None:
        self.root, self.name = root, name
        self.pg_port, self.api_port = free_port(), free_port()
        self.data = root / name
        self.config = root / f"{name}.yml"
        self.log = root / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.config.write_text(yaml.safe_dump(self._settings(etcd)))

    def _settings(self, etcd: str) -> dict[str, Any]:
        trust = [
            "host replication replicator 127.0.0.1/32 trust",
            "host all all 127.0.0.1/32 trust",
        ]
        return {
            "scope": "xce",
            "name": self.name,
            "restapi": {
                "listen": f"127.0.0.1:{self.api_port}",
                "connect_address": f"127.0.0.1:{self.api_port}",
            },
            "etcd3": {"hosts": etcd},
            "bootstrap": {
                "dcs": {
                    # The platform's measured settings: about 20 s without writes per failover.
                    "ttl": 20,
                    "loop_wait": 2,
                    "retry_timeout": 5,
                    "synchronous_mode": True,
                    "postgresql": {"use_pg_rewind": False, "parameters": {"wal_log_hints": "on"}},
                },
                "initdb": [{"encoding": "UTF8"}],
                "pg_hba": trust,
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.pg_port}",
                "connect_address": f"127.0.0.1:{self.pg_port}",
                "data_dir": str(self.data),
                "bin_dir": str(PG_BIN),
                "pgpass": str(self.root / f"{self.name}.pgpass"),
                "authentication": {
                    "replication": {"username": "replicator", "password": "replicator"},
                    "superuser": {"username": "postgres", "password": "postgres"},
                },
                "parameters": {"unix_socket_directories": str(self.root)},
                "pg_hba": trust,
            },
        }

    def start(self) -> None:
        self.proc = _as_postgres(["patroni", str(self.config)], self.log)

    def role(self) -> str:
        """ "master"/"primary"/"leader", "replica", or "" when its Patroni does not answer."""
        try:
            got = requests.get(f"http://127.0.0.1:{self.api_port}/patroni", timeout=1)
            data = got.json()
        except (requests.RequestException, ValueError):
            return ""
        state = data.get("state", "")
        return str(data.get("role", "")) if state == "running" else ""

    def is_leader(self) -> bool:
        return self.role() in ("master", "primary", "leader")

    def kill(self) -> None:
        """SIGKILL Patroni and every process of this node's PostgreSQL (the machine is gone)."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None
        pidfile = self.data / "postmaster.pid"
        try:
            postmaster = int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        for pid in [*_children(postmaster), postmaster]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def wipe(self) -> None:
        shutil.rmtree(self.data, ignore_errors=True)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(x) for x in out.stdout.split()]


class PatroniCluster:
    def __init__(self, root: Path, nodes: int = 2) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        shutil.chown(root, "postgres", "postgres")
        root.chmod(0o700)
        self.etcd_port, self.peer_port = free_port(), free_port()
        self.etcd: subprocess.Popen[bytes] | None = None
        hosts = f"127.0.0.1:{self.etcd_port}"
        self.nodes = [Node(root, f"pg{n}", hosts) for n in range(1, nodes + 1)]
        for path in root.iterdir():
            shutil.chown(path, "postgres", "postgres")

    def start(self, timeout: float = 120) -> PatroniCluster:
        client, peer = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.peer_port}"
        self.etcd = _as_postgres(
            ["etcd", "--name", "e1", "--data-dir", str(self.root / "etcd"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"e1={peer}"],
            self.root / "etcd.log",
        )  # fmt: skip
        self.nodes[0].start()
        self.wait(self.nodes[0].is_leader, timeout, "a leader")
        for node in self.nodes[1:]:
            node.start()
        self.wait(self.synced, timeout, "a synchronous replica")
        return self

    def synced(self) -> bool:
        """A leader, and a replica streaming synchronously (so a failover loses no commit)."""
        try:
            got = requests.get(f"http://127.0.0.1:{self.leader().api_port}/cluster", timeout=1)
            members = got.json().get("members", [])
        except (requests.RequestException, ValueError, LookupError):
            return False
        return any(m.get("role") in ("sync_standby", "sync_replica") for m in members)

    def leader(self) -> Node:
        for node in self.nodes:
            if node.is_leader():
                return node
        raise LookupError("no leader")

    def wait(self, check: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.2)
        logs = {n.name: n.log.read_text()[-1500:] for n in self.nodes if n.log.exists()}
        raise RuntimeError(f"the Patroni cluster did not reach {what}: {json.dumps(logs)}")

    def dsn(self, db: str = "xce") -> str:
        """A libpq multi-host string that finds the writable node (what replicas are given)."""
        hosts = ",".join("127.0.0.1" for _ in self.nodes)
        ports = ",".join(str(n.pg_port) for n in self.nodes)
        return (
            f"host={hosts} port={ports} user=postgres password=postgres dbname={db} "
            "target_session_attrs=read-write connect_timeout=2"
        )

    def sql(self, statement: str) -> str:
        node = self.leader()
        out = subprocess.run(
            ["runuser", "-u", "postgres", "--", str(PG_BIN / "psql"), "-h", "127.0.0.1",
             "-p", str(node.pg_port), "-U", "postgres", "-AtXc", statement],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return out.stdout.strip()

    def close(self) -> None:
        for node in self.nodes:
            node.kill()
        if self.etcd is not None:
            os.killpg(self.etcd.pid, signal.SIGKILL)
            self.etcd.wait()
        shutil.rmtree(self.root, ignore_errors=True)
