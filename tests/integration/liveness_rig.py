"""The liveness checker's rig: three replicas on PostgreSQL, each reaching the database through
its own partition proxy, simulated hosts heartbeating through them, and a random schedule of
faults: a replica killed -9 and restarted, stopped (SIGSTOP) or cut off from the database,
the whole database stopped, a host silenced for good. Faults overlap; some last longer than
the grace. liveness_history.py judges what the hosts saw against the lost facts stored.

A host heartbeats every INTERVAL. Without an answer in TIMEOUT, or on a 502/503/504 (the
agent's rule, xce_protocol.replicas.moves_on), it moves to the next replica and tries again
after a backoff that doubles up to a quarter of the grace (the agent's URL list backs off to
below half of it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import psutil

from bench.ha_rig import JOIN_TOKEN, config
from bench.loadgen import Conn
from tests.integration.controller_proc import ControllerProcess
from tests.integration.liveness_history import Beats, Loss, violations
from tests.integration.test_outcome_unknown_replicas import through
from tests.integration.test_replica_isolated import Blackhole
from tests.pg_server import PgCluster
from xce_controller.store.open import open_store
from xce_protocol.replicas import moves_on

INTERVAL = 1.0
GRACE = 12.0  # isolated after an eighth: 1.5 s
# A heartbeat acknowledged may reach the other replicas this late (docs/ha.md: written every
# 0.5 s, a read unanswered for 1 s, isolated 2 s later at most), or never if its replica dies
# first; a loss that soon after an acknowledged heartbeat is a breach all the same.
SLACK = 4.0
TIMEOUT = 2.0
REPLICAS = 3
HOSTS = 24
BODY = {"agent_state": "running", "components": [{"name": "worker", "state": "running"}]}


class Kind(str, Enum):
    KILL = "kill"  # kill -9 of a replica, started again after `lasts`
    PAUSE = "pause"  # SIGSTOP of a replica for `lasts`
    PARTITION = "partition"  # a replica's database traffic held back for `lasts`
    DB_PAUSE = "db-pause"  # SIGSTOP of every database process for `lasts`
    SILENCE = "silence"  # host `target` stops heartbeating for good
    # Every agent restarted (a package upgrade): each starts again from the first URL of its
    # own list (hosts' lists begin at different replicas). Without it the hosts pile up on the
    # replicas faulted least, since an agent stays where it is answered.
    RESTART = "agents-restart"


@dataclass(frozen=True)
class Fault:
    at: float  # seconds into the run
    kind: Kind
    target: int  # a replica, or a host for SILENCE (-1 for the database)
    lasts: float

    def __str__(self) -> str:
        where = (
            "all"
            if self.kind is Kind.RESTART
            else "db"
            if self.target < 0
            else f"{'h' if self.kind is Kind.SILENCE else 'r'}{self.target}"
        )
        return f"{self.at:.1f}s {self.kind.value} {where} {self.lasts:.1f}s"


WEIGHTS = {
    Kind.KILL: 2,
    Kind.PAUSE: 3,
    Kind.PARTITION: 3,
    Kind.DB_PAUSE: 1,
    Kind.SILENCE: 1,
    Kind.RESTART: 1,
}


def schedule(seed: int, seconds: float) -> list[Fault]:
    """Faults starting every 3 s on average (exponential gaps) over `seconds`, each over by
    then; one fault per target at a time, three hosts silenced at most. A third of the stops
    and cuts last longer than the grace. One replica is spared: every fault of a replica
    gives it a fresh grace for every host (a start, a stall), so with all of them faulted
    this often no replica would ever judge a host, and a fault the rules should cover (a
    replica cut off past the grace, its hosts unheard by the others) would go unseen."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible schedule
    spared = rng.randrange(REPLICAS)
    free_at = [float("inf") if k == spared else 0.0 for k in range(REPLICAS)]
    # One host silenced in the first half, always: a run sees a loss it must decide.
    faults = [Fault(rng.uniform(2, seconds / 2), Kind.SILENCE, rng.randrange(HOSTS), 0.0)]
    db_free_at, silenced = 0.0, 1
    t = 1.0 + rng.uniform(0, 2)
    while t < seconds - 1:
        kind = rng.choices(list(WEIGHTS), list(WEIGHTS.values()))[0]
        longest = seconds - t
        if kind is Kind.SILENCE:
            if silenced < 3:
                faults.append(Fault(t, kind, rng.randrange(HOSTS), 0.0))
                silenced += 1
        elif kind is Kind.RESTART:
            faults.append(Fault(t, kind, -1, 0.0))
        elif kind is Kind.DB_PAUSE:
            if db_free_at <= t:
                lasts = min(longest, rng.uniform(1, 1.5 * GRACE))
                faults.append(Fault(t, kind, -1, lasts))
                db_free_at = t + lasts
        else:
            free = [k for k in range(REPLICAS) if free_at[k] <= t]
            if free:
                long = rng.random() < 1 / 3
                spell = rng.uniform(GRACE, 2 * GRACE) if long else rng.uniform(0.5, GRACE / 2)
                lasts = min(longest, rng.uniform(0.2, 8) if kind is Kind.KILL else spell)
                k = rng.choice(free)
                faults.append(Fault(t, kind, k, lasts))
                free_at[k] = t + lasts + 0.5
        t += rng.expovariate(1 / 3)
    return sorted(faults, key=lambda f: f.at)


@dataclass
class Host:
    name: str
    home: int  # the first replica of its list
    at: int  # the replica it heartbeats through
    credential: str = ""
    acked: list[float] = field(default_factory=list)
    silenced_at: float | None = None
    conn: Conn | None = None
    restarted: bool = False


@dataclass
class Outcome:
    seed: int
    faults: list[Fault]
    breaches: list[str]
    losses: list[Loss]
    counts: Counter[str]  # what the hosts met: ack, moved, timeout, 503, refused_<status>
    held: int  # chunks the partition proxies held back: the cuts were met

    def summary(self) -> str:
        met = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        return (
            f"seed {self.seed}: {len(self.faults)} faults, {len(self.losses)} lost, "
            f"{len(self.breaches)} breaches; hosts met: {met}; held {self.held}"
        )


class Rig:
    """One schedule's replicas (a schema of its own on `pg`), proxies and hosts."""

    def __init__(self, root: Path, pg: PgCluster) -> None:
        self.pg = pg
        self.direct = pg.database()
        socket = f"{pg.primary.socket}/.s.PGSQL.{pg.primary.port}"
        self.proxies = [Blackhole(socket) for _ in range(REPLICAS)]
        self.procs: list[ControllerProcess] = []
        for k, proxy in enumerate(self.proxies):
            (root / f"r{k}").mkdir()
            proc = ControllerProcess(
                root / f"r{k}", config(INTERVAL, GRACE), db=through(proxy, pg, self.direct)
            )
            proc.env = {**os.environ, "XCE_REPLICA_ID": f"r{k}"}
            self.procs.append(proc)
        self.hosts = [Host(f"lv{i}", i % REPLICAS, i % REPLICAS) for i in range(HOSTS)]
        self.counts: Counter[str] = Counter()
        self.stopping = False
        self.began = 0.0  # the wall time the faults count from
        self.busy: dict[int, asyncio.Lock] = {}  # made in the run's loop (_run)

    def start(self) -> Rig:
        open_store(self.direct).close()  # the schema, once, before the replicas race for it
        for proc in self.procs:
            proc.start()
        return self

    def stop(self) -> None:
        # A run that broke off mid-fault leaves nothing stopped: the database is the
        # module's, and a stopped replica would not hear its SIGTERM.
        with contextlib.suppress(psutil.Error):
            _continued(_database_pids(self.pg))
        _continued([p.proc.pid for p in self.procs if p.proc and p.proc.poll() is None], True)
        for proxy in self.proxies:
            proxy.heal()
        for proc in self.procs:
            proc.stop()
        for proxy in self.proxies:
            proxy.close()

    async def join(self) -> None:
        conn = Conn("127.0.0.1", self.procs[0].port)
        try:
            for i, host in enumerate(self.hosts):
                body = {"host": host.name, "instance_id": f"i-lv-{i}"}
                status, answer = await conn.request("POST", "/v1/join", body, JOIN_TOKEN)
                assert status == 200, (status, answer)
                host.credential = str(answer.get("credential", ""))
        finally:
            conn.close()

    async def _once(self, host: Host) -> int | None:
        """One heartbeat through the host's replica: its status, None for none in TIMEOUT;
        it moves to the next replica as the agent's URL list does (moves_on)."""
        if host.restarted and host.conn is not None:
            host.conn.close()  # to the replica it was at before the restart
            host.conn = None
        host.restarted = False
        if host.conn is None:
            host.conn = Conn("127.0.0.1", self.procs[host.at].port)
        path = f"/v1/hosts/{host.name}/heartbeat"
        status: int | None
        try:
            status, _ = await asyncio.wait_for(
                host.conn.request("POST", path, BODY, host.credential), TIMEOUT
            )
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError):
            status = None
        if moves_on(status):
            self.counts["timeout-or-refused-connection" if status is None else str(status)] += 1
            host.conn.close()
            host.conn = None
            host.at = (host.at + 1) % REPLICAS
            self.counts["moved"] += 1
        return status

    def _done(self, host: Host) -> bool:
        return self.stopping or host.silenced_at is not None

    async def beat(self, host: Host, phase: float) -> None:
        due = time.monotonic() + phase
        backoff = 0.2
        while not self._done(host):
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            if self._done(host):
                break
            sent = time.time()
            status = await self._once(host)
            if status == 200:
                host.acked.append(sent)
                self.counts["ack"] += 1
                due, backoff = max(due + INTERVAL, time.monotonic()), 0.2
            elif moves_on(status):
                due, backoff = time.monotonic() + backoff, min(backoff * 2, GRACE / 4)
            else:
                self.counts[f"refused_{status}"] += 1
                due = max(due + INTERVAL, time.monotonic())
        if host.conn is not None:
            host.conn.close()

    async def strike(self, fault: Fault, began: float) -> None:
        await asyncio.sleep(max(0.0, began + fault.at - time.monotonic()))
        if fault.kind is Kind.SILENCE:
            self.hosts[fault.target].silenced_at = time.time()
            return
        if fault.kind is Kind.RESTART:
            for host in self.hosts:
                host.at, host.restarted = host.home, True
            return
        # One fault at a time per target: a replica's restart may outlast the gap the
        # schedule left, and a kill or stop meeting it left two processes for one port.
        async with self.busy[fault.target]:
            undo = await asyncio.to_thread(self._apply, fault)
            await asyncio.sleep(fault.lasts)
            await asyncio.to_thread(undo)

    def _apply(self, fault: Fault) -> Callable[[], None]:
        if fault.kind is Kind.DB_PAUSE:
            return _signalled(_database_pids(self.pg))
        proc = self.procs[fault.target]
        if fault.kind is Kind.PARTITION:
            self.proxies[fault.target].partition()
            return self.proxies[fault.target].heal
        if fault.kind is Kind.PAUSE:
            assert proc.proc is not None
            return _signalled([proc.proc.pid], group=True)
        proc.kill()
        return lambda: _restart(proc)

    def losses(self) -> list[Loss]:
        store = open_store(self.direct)
        try:
            cluster, _ = store.load()
            names = {key: h.name for key, h in cluster.hosts.items()}
            lost = [f for f in store.facts() if f.kind == "state" and f.data["state"] == "lost"]
            keys = [str(f.data["key"]) for f in lost]
            return [Loss(names.get(k, k), f.at, str(f.data.get("why"))) for k, f in zip(keys, lost)]
        finally:
            store.close()

    def judged(self, began: float) -> list[str]:
        """The breaches, times in seconds from `began` (a wall time) as the faults print."""
        hosts = {
            h.name: Beats(
                [t - began for t in h.acked],
                None if h.silenced_at is None else h.silenced_at - began,
            )
            for h in self.hosts
        }
        losses = [Loss(x.host, x.at - began, x.why) for x in self.losses()]
        return violations(hosts, losses, GRACE, SLACK)


def _database_pids(pg: PgCluster) -> list[int]:
    return [p.pid for p in pg.primary.processes()]


def _signalled(pids: list[int], group: bool = False) -> Callable[[], None]:
    """SIGSTOP to `pids` (process groups when `group`); what sends SIGCONT."""
    send = os.killpg if group else os.kill
    for pid in pids:
        send(pid, signal.SIGSTOP)
    return lambda: _continued(pids, group)


def _continued(pids: list[int], group: bool = False) -> None:
    """SIGCONT to `pids` (process groups when `group`), those still there."""
    send = os.killpg if group else os.kill
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            send(pid, signal.SIGCONT)


def _restart(proc: ControllerProcess) -> None:
    """Started again (on its port); a start that meets the database stopped is tried again."""
    for _ in range(3):
        try:
            proc.start()
            return
        except RuntimeError:
            proc.kill()
    proc.start()


async def _run(rig: Rig, seed: int, seconds: float) -> list[Fault]:
    faults = schedule(seed, seconds)
    await rig.join()
    rig.busy = {k: asyncio.Lock() for k in (-1, *range(REPLICAS))}
    began, rig.began = time.monotonic(), time.time()
    rng = random.Random(seed)  # noqa: S311 - reproducible phases
    beats = [asyncio.ensure_future(rig.beat(h, rng.uniform(0, INTERVAL))) for h in rig.hosts]
    await asyncio.gather(*(rig.strike(f, began) for f in faults))
    # Everything healed: the silenced hosts' losses come within a grace or two (a stall or
    # a start gives every host a fresh grace, first looked at in its last half).
    silenced = {rig.hosts[f.target].name for f in faults if f.kind is Kind.SILENCE}
    deadline = time.monotonic() + 2.5 * GRACE
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        if silenced <= {loss.host for loss in await asyncio.to_thread(rig.losses)}:
            break
    await asyncio.sleep(2 * INTERVAL)  # a loss of a beating host decided just now is seen too
    rig.stopping = True
    await asyncio.gather(*beats)
    return faults


def run(root: Path, pg: PgCluster, seed: int, seconds: float) -> Outcome:
    rig = Rig(root, pg).start()
    try:
        faults = asyncio.run(_run(rig, seed, seconds))
        losses = rig.losses()
        breaches = rig.judged(rig.began)
    finally:
        rig.stop()
    held = sum(p.held for p in rig.proxies)
    return Outcome(seed, faults, breaches, losses, rig.counts, held)
