"""A rig for controller replicas under load: a throw-away PostgreSQL (with a synchronous
standby when asked), N `xce-controller serve` replicas on it, and the load generator's
simulated hosts spread over them (bench/loadgen.py, unchanged).

Host i is served by replica i % N, as agents that each have the replicas' URLs in a different
order (or a load balancer's even spread). Its heartbeat connection roams as the agent's own
list does: on a transport failure or a 503 the next request goes to the next replica. Watches
are held on the host's own replica (one Fleet per replica, sharing the hosts' connections and
credentials). Used by the HA bench (bench/ha.py) and the failover tests.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

from bench.loadgen import Conn, Fleet, Samples
from tests.integration.controller_proc import ControllerProcess
from tests.pg_server import PgCluster, PgServer

T = TypeVar("T")
ADMIN_TOKEN = "bench-admin-token-0123456789"  # noqa: S105 - a throwaway cluster's
JOIN_TOKEN = "bench-join-token-0123456789"  # noqa: S105 - a throwaway cluster's


def config(interval: float = 10.0, grace: float = 300.0) -> str:
    # A short grace needs short restart allowances (the config requires grace > their sum).
    short = "agent_max_restart_backoff: 5s\nrejoin_allowance: 5s\n" if grace < 60 else ""
    return f"""\
version: 1
heartbeat_interval: {interval:g}s
host_loss_grace: {grace:g}s
{short}unmatched_joins: accept
auth: {{admin_token: {ADMIN_TOKEN}, join_token: {JOIN_TOKEN}}}
templates:
  default: {{slots: 4}}
"""


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """uvloop when installed, as bench/controller_load.py runs (its run_loop is typed for its
    own result)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


class Database:
    """A primary on a unix socket, and a synchronous streaming standby when `standby`."""

    def __init__(self, port: int = 5460, standby: bool = False) -> None:
        self.cluster = PgCluster(port=port)
        self.primary = self.cluster.primary
        self.standby: PgServer | None = None
        self.primary.sql("ALTER SYSTEM SET max_connections = 300")
        self.primary.sql("CREATE DATABASE xce")
        if standby:
            self.standby = self.primary.standby("standby", port + 1)
            self.cluster.servers.append(self.standby)
            self.primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
            self.primary.sql("SELECT pg_reload_conf()")

    @property
    def dsn(self) -> str:
        """Both servers in one multi-host string: the replicas find whichever is the primary."""
        root = self.cluster.root
        if self.standby is None:
            return self.primary.dsn("xce")
        return (
            f"host={root},{root} port={self.primary.port},{self.standby.port} user=postgres "
            "dbname=xce target_session_attrs=read-write connect_timeout=2"
        )

    @property
    def current(self) -> str:
        """The server that is the primary now (the standby once it was promoted)."""
        server = self.standby if self.standby is not None and not self.primary.proc_pid else None
        return (server or self.primary).dsn("xce")

    def sync_ready(self) -> bool:
        got = self.primary.sql("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")
        return got == "1"

    def pids(self) -> list[int]:
        """The live servers' postmasters (their backends are their children)."""
        return [s.proc_pid for s in self.cluster.servers if s.proc_pid]

    def close(self) -> None:
        self.cluster.close()


class Replicas:
    def __init__(self, root: Path, store: str, count: int, text: str) -> None:
        self.procs: list[ControllerProcess] = []
        for n in range(count):
            workdir = root / f"replica{n}"
            workdir.mkdir(parents=True, exist_ok=True)
            proc = ControllerProcess(workdir, text, db=store)
            proc.env = {**os.environ, "XCE_REPLICA_ID": f"r{n}"}
            self.procs.append(proc)

    def start(self) -> Replicas:
        for proc in self.procs:
            proc.start()
        return self

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()

    @property
    def ports(self) -> list[int]:
        return [p.port for p in self.procs]

    def pids(self) -> list[int]:
        return [p.proc.pid for p in self.procs if p.proc is not None and p.proc.poll() is None]


class RoamingConn(Conn):
    """A host's connection that moves to the next replica on a transport failure or a 503,
    as the agent does with a list of controller URLs (keeping its credential)."""

    def __init__(self, host: str, ports: list[int], first: int, failures: list[float]) -> None:
        super().__init__(host, ports[first % len(ports)])
        self.failures = failures  # when a request failed (perf_counter), shared by the fleet
        self.ports = ports
        self.at = first % len(ports)
        self.moves = 0

    def move(self) -> None:
        self.close()
        self.at = (self.at + 1) % len(self.ports)
        self.port = self.ports[self.at]
        self.moves += 1

    async def request(
        self, method: str, path: str, body: Any = None, bearer: str = ""
    ) -> tuple[int, Any]:
        try:
            status, answer = await super().request(method, path, body, bearer)
        except (OSError, asyncio.IncompleteReadError):
            self.failures.append(time.perf_counter())
            if len(self.ports) > 1:
                self.move()
            raise
        if status != 200:
            self.failures.append(time.perf_counter())
        if status == 503 and len(self.ports) > 1:
            self.move()
        return status, answer


class Spread:
    """Simulated hosts spread over replicas: `fleets[k]` holds the watches on replica k; all
    share one set of heartbeat connections (each host's RoamingConn), credentials, versions."""

    def __init__(self, ports: list[int], token: str = JOIN_TOKEN) -> None:
        self.ports = ports
        self.fleets = [Fleet("127.0.0.1", port, token) for port in ports]
        self.busy = 0  # joins answered 503 (and tried again)
        self.failures: list[float] = []  # when a request of a host failed (perf_counter)
        first = self.fleets[0]
        for fleet in self.fleets[1:]:
            fleet.beats = first.beats
            fleet.credentials = first.credentials
            fleet.versions = first.versions

    @property
    def lead(self) -> Fleet:
        return self.fleets[0]

    def place(self, first: int, last: int) -> None:
        for i in range(first, last):
            self.lead.beats.setdefault(i, RoamingConn("127.0.0.1", self.ports, i, self.failures))

    async def join(
        self, first: int, last: int, concurrency: int = 32, via: int | None = None
    ) -> list[float]:
        """As Fleet.join_all, but a 503 (the replicas kept overtaking each other's decisions,
        or the database is away) is tried again later, as the agent does; the finish times.
        Each host joins through its own replica, or all through replica `via`."""
        self.place(first, last)
        fleet, done = self.lead, []
        queue = iter(range(first, last))

        async def worker() -> None:
            own = Conn("127.0.0.1", self.ports[via]) if via is not None else None
            for i in queue:
                body = {"host": fleet.name(i), "instance_id": f"i-load-{i}"}
                conn = own or fleet.beats[i]
                while True:
                    status, answer = await conn.request("POST", "/v1/join", body, fleet.join_token)
                    if status != 503:
                        break
                    self.busy += 1
                    await asyncio.sleep(random.uniform(0.1, 0.5))
                if status != 200:
                    raise SystemExit(f"bench: join {i} answered {status}: {answer}")
                fleet.versions[i] = int(answer["version"])
                fleet.credentials[i] = str(answer.get("credential", ""))
                done.append(time.perf_counter())
            if own is not None:
                own.close()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done

    def mine(self, k: int, hosts: Iterable[int]) -> range:
        n = len(self.ports)
        chosen = list(hosts)
        lo = min(chosen, default=0)
        start = lo + (k - lo) % n
        return range(start, max(chosen, default=-1) + 1, n)

    async def start_watches(self, hosts: range, in_phase: bool = False) -> None:
        """Each replica's share of `hosts` watched on it: staggered, or all within a second."""
        jobs = []
        for k, fleet in enumerate(self.fleets):
            share = self.mine(k, hosts)
            rate = max(len(share), 1) if in_phase else 2000.0 / len(self.fleets)
            jobs.append(fleet.start_watches(share, per_second=rate, in_phase=in_phase))
        await asyncio.gather(*jobs)

    async def stop_watches(self) -> None:
        await asyncio.gather(*(f.stop_watches() for f in self.fleets))

    async def heartbeats(self, hosts: range, interval: float, seconds: float, seed: int) -> Samples:
        return await self.lead.heartbeats(hosts, interval, seconds, seed)

    def moves(self) -> int:
        return sum(c.moves for c in self.lead.beats.values() if isinstance(c, RoamingConn))

    def close(self) -> None:
        self.lead.close()
