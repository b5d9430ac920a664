"""The lease checker's rig with its controller as two replicas on PostgreSQL: a primary and
a synchronous streaming standby, the replicas on a multi-host connection string
(`target_session_attrs=read-write`), each agent's proxy forwarding to whichever replica
accepts (a load balancer). Its controller faults: kill -9 of one replica (restarted later),
and a database failover: kill -9 of the primary, `pg_ctl promote` of the standby, then a new
synchronous standby made from the new primary, ready for the next failover."""

from __future__ import annotations

import contextlib
import random
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, ClassVar

import requests

from tests.integration.controller_proc import ControllerProcess
from tests.integration.helpers import wait_for
from tests.integration.lease_cluster import ADMIN, CLUSTER, LeaseCluster
from tests.integration.replica_set import Replicas
from tests.pg_server import PgCluster, PgServer

PORTS = (5452, 5453)


class ReplicaLeaseCluster(LeaseCluster):
    controller_faults: ClassVar[dict[str, int]] = {"kill-replica": 2, "db-failover": 1}

    def _start_controllers(self) -> list[int]:
        self.pg = PgCluster(port=PORTS[0])
        self.failovers = 0
        try:
            self.pg.primary.sql("CREATE DATABASE xce")
            self.standby = self._new_standby(self.pg.primary, "standby", PORTS[1])
            root = self.pg.root
            dsn = (
                f"host={root},{root} port={PORTS[0]},{PORTS[1]} user=postgres dbname=xce "
                "target_session_attrs=read-write connect_timeout=2"
            )
            self.replicas = Replicas(self.root, dsn, 2, CLUSTER).start()
        except BaseException:
            self.pg.close()
            raise
        self.ctl = self.replicas[0]
        return [p.port for p in self.replicas.procs]

    def _new_standby(self, primary: PgServer, name: str, port: int) -> PgServer:
        """A streaming standby of `primary`, made synchronous: a commit is acknowledged once
        it is on the standby too (a grant lost in a failover would let two hold a lease)."""
        standby = _standby_again(primary, name, port)
        self.pg.servers.append(standby)
        primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        primary.sql("SELECT pg_reload_conf()")
        sync = "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
        wait_for(lambda: primary.sql(sync) == "1", timeout=30)
        return standby

    def _stop_controllers(self) -> None:
        try:
            self.replicas.stop()
        finally:
            self.pg.close()

    def controller_fault(self, kind: str, rnd: random.Random) -> float:
        if kind == "kill-replica":
            victim = self.replicas[rnd.randrange(len(self.replicas.procs))]
            duration = rnd.uniform(0.2, 1.5) * self.ttl
            victim.kill()
            time.sleep(duration)
            _start_as_systemd_would(victim)
            return duration
        assert kind == "db-failover"
        began = time.monotonic()
        old, new = self.pg.primary, self.standby
        old.kill()
        new.promote()
        took = time.monotonic() - began
        self.failovers += 1
        self.pg.primary = new
        self.pg.servers.remove(old)
        wait_for(lambda: not (old.data / "postmaster.pid").exists() or _gone(old), timeout=10)
        shutil.rmtree(old.data)
        self.standby = self._new_standby(new, old.data.name, old.port)
        return took

    def heal_controller(self) -> None:
        for proc in self.replicas.procs:
            if proc.proc is None or proc.proc.poll() is not None:
                _start_as_systemd_would(proc)

    def admin(self, method: str, path: str) -> Any:
        """Asked of each replica in turn: one may be down."""
        headers = {"Authorization": f"Bearer {ADMIN}"}
        failed: requests.RequestException | None = None
        for url in self.replicas.urls:
            with contextlib.suppress(requests.RequestException):
                r = requests.request(method, url + path, headers=headers, timeout=10)
                if r.status_code == 200:
                    return r.json()
                failed = requests.HTTPError(f"{url}{path}: {r.status_code}")
        raise failed or requests.ConnectionError("no replica answered")


def _standby_again(primary: PgServer, name: str, port: int) -> PgServer:
    """A standby made where a killed server was: its start sometimes failed once (`pg_ctl
    start` exit 1 on the killed server's port, moments after the kill), and a failover's
    exception then left the next one promoting the new primary. Made again a few times."""
    for _ in range(9):
        try:
            return primary.standby(name, port)
        except subprocess.CalledProcessError:
            shutil.rmtree(primary.root / name, ignore_errors=True)
            time.sleep(0.5)
    return primary.standby(name, port)


def _start_as_systemd_would(proc: ControllerProcess) -> None:
    """A replica that finds no database at its start (a failover under way) exits 1, and
    systemd starts it again (Restart=on-failure in systemd/xce-controller.service); so does
    the rig, rather than take that exit for a failure of the run."""
    deadline = time.monotonic() + 60
    while True:
        try:
            proc.start()
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _gone(server: PgServer) -> bool:
    """No process holds the killed server's data directory any more."""
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and (proc / "cwd").resolve() == server.data:
                return False
    return True
