"""Replicas on PostgreSQL beside the single SQLite process, open loop, in one run.

Each mode gets the same load (bench/loadgen.py through bench/ha_rig.py): hosts heartbeating
every 10 s with a watch each held open, the watches started staggered and then all within
one second (in phase, as after a restart), at each size asked; while the staggered phase
runs, a probe measures the cross-replica wake (an admin change through one replica, the
host's watch held on the next one answering). Then writers append facts as fast as the
store takes them. CPU per heartbeat of the replicas and of the database is printed for the
paper model in docs/ha.md. Everything shares the machine's cores.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench import Skipped
from bench.controller_load import cpu_seconds, raise_fd_limit, rss_mb
from bench.ha_rig import ADMIN_TOKEN, Database, Replicas, Spread, config, run_loop
from bench.loadgen import Conn, Samples, window_p99, worst_window
from bench.stats import percentile, table
from tests.pg_server import why_not
from xce_controller.store.open import open_store

TODAY = {5000: 4.7, 10000: 10.9}  # the README's SQLite heartbeat p99 (ms) before replicas
PROBES = 8  # hosts whose watches the wake probe uses (beside the fleet)


@dataclass
class Phase:
    samples: Samples
    cpu_replicas: float = 0.0  # CPU seconds of all replicas during the phase
    cpu_db: float = 0.0  # of the database's processes
    wakes: list[float] = field(default_factory=list)  # seconds, admin answer to watch answer


@dataclass
class Size:
    hosts: int
    watched: int
    joins: float  # joins/s of the hosts added for this size
    busy: int  # joins answered 503 and tried again
    reload: float  # seconds to read the whole state (what a replica does on a stale change)
    staggered: Phase
    phased: Phase
    rss: list[float]  # MB per replica, watches open


@dataclass
class Mode:
    label: str
    sizes: list[Size] = field(default_factory=list)
    appends: float = 0.0  # facts appended per second, writers through every replica
    append_cpu_db: float = 0.0  # database CPU seconds per append
    append_cpu_replicas: float = 0.0


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]
    seconds: float
    phased: float
    appends: float
    interval: float


def run(
    sizes: tuple[int, ...] = (5000, 10000),
    seconds: float = 30.0,
    phased: float = 45.0,
    appends: float = 10.0,
    replicas: int = 3,
    interval: float = 10.0,
) -> str:
    """`phased`: seconds of the in-phase load (45 s covers every 30 s hold's first end)."""
    reason = why_not()
    if reason:
        raise Skipped(reason)
    limit = raise_fd_limit(2 * max(sizes) + 1024)
    plan = Plan(tuple(sorted(sizes)), seconds, phased, appends, interval)
    modes = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with _sqlite(root / "sqlite") as (ports, pids, store):
            modes.append(run_loop(_mode("SQLite, 1 process", ports, pids, store, plan, limit)))
        with _postgres(root / "pg", replicas) as (ports, pids, store):
            label = f"{replicas} replicas on PostgreSQL"
            modes.append(run_loop(_mode(label, ports, pids, store, plan, limit)))
    return _render(modes, plan)


@contextmanager
def _sqlite(root: Path) -> Iterator[tuple[list[int], list[int], str]]:
    procs = Replicas(root, str(root / "controller.db"), 1, config()).start()
    try:
        yield procs.ports, procs.pids(), str(root / "controller.db")
    finally:
        procs.stop()


@contextmanager
def _postgres(root: Path, count: int) -> Iterator[tuple[list[int], list[int], str]]:
    db = Database()
    try:
        open_store(db.dsn).close()  # the schema, before the replicas race for it
        procs = Replicas(root, db.dsn, count, config()).start()
        try:
            yield procs.ports, [*procs.pids(), *(-p for p in db.pids())], db.dsn
        finally:
            procs.stop()
    finally:
        db.close()


def _cpu(pids: list[int]) -> tuple[float, float]:
    """CPU seconds of the replicas (positive pids) and the database (negated postmasters,
    their backends included)."""
    replicas = sum(cpu_seconds(p) for p in pids if p > 0)
    db = 0.0
    for pid in (-p for p in pids if p < 0):
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            db += times.user + times.system
    return replicas, db


async def _mode(
    label: str, ports: list[int], pids: list[int], store: str, plan: Plan, limit: int
) -> Mode:
    mode = Mode(label)
    spread = Spread(ports)
    probes = await _probes(ports)
    joined = 0
    for hosts in plan.sizes:
        began, busy = time.perf_counter(), spread.busy
        await spread.join(joined, hosts)
        joins = (hosts - joined) / (time.perf_counter() - began)
        joined = hosts
        reload = _reload_seconds(store)
        watched = max(0, min(hosts, limit - hosts - 512 - 2 * PROBES))
        await spread.start_watches(range(watched))
        rss = [rss_mb(p) for p in pids if p > 0]
        staggered = await _phase(spread, pids, hosts, plan.seconds, plan, probes, seed=1)
        await spread.stop_watches()
        await spread.start_watches(range(watched), in_phase=True)
        phased = await _phase(spread, pids, hosts, plan.phased, plan, None, seed=2)
        await spread.stop_watches()
        busy = spread.busy - busy
        mode.sizes.append(Size(hosts, watched, joins, busy, reload, staggered, phased, rss))
    mode.appends, mode.append_cpu_replicas, mode.append_cpu_db = await _appends(
        ports, pids, store, plan.appends
    )
    spread.close()
    for conn in probes.conns:
        conn.close()
    return mode


async def _phase(
    spread: Spread,
    pids: list[int],
    hosts: int,
    seconds: float,
    plan: Plan,
    probes: Probes | None,
    seed: int,
) -> Phase:
    cpu0 = _cpu(pids)
    stop = asyncio.Event()
    waking = asyncio.ensure_future(probes.run(stop)) if probes else None
    samples = await spread.heartbeats(range(hosts), plan.interval, seconds, seed)
    stop.set()
    wakes = await waking if waking else []
    cpu1 = _cpu(pids)
    return Phase(samples, cpu1[0] - cpu0[0], cpu1[1] - cpu0[1], wakes)


@dataclass
class Probes:
    """Hosts watched on one replica and changed through another: the cross-replica wake."""

    ports: list[int]
    names: list[str]
    credentials: list[str]
    versions: list[int]
    conns: list[Conn]  # per probe: its watch (on replica n+1) and its admin (on replica n)
    closed: list[bool]  # each probe host's state, as the last accepted change left it

    async def run(self, stop: asyncio.Event, every: float = 0.5) -> list[float]:
        wakes: list[float] = []
        n = 0
        while not stop.is_set():
            i = n % len(self.names)
            # The action that changes the host: an alternation restarted each phase closed an
            # already closed host (409, no change) and measured the watch's hold instead.
            woke = await self.once(i, "open" if self.closed[i] else "close")
            if woke is not None:
                wakes.append(woke)
            n += 1
            await asyncio.sleep(every)
        return wakes

    async def once(self, i: int, action: str) -> float | None:
        try:
            return await self._once(i, action)
        except (OSError, asyncio.IncompleteReadError):  # a kept-alive connection timed out
            self.conns[2 * i].close()
            self.conns[2 * i + 1].close()
            return None

    async def _once(self, i: int, action: str) -> float | None:
        """Seconds from the change's answer (through replica i) to the watch's answer (on
        replica i + 1), 0 when the watch answered first; None if no watch could be held."""
        name = self.names[i]
        watch, admin = self.conns[2 * i], self.conns[2 * i + 1]
        for _ in range(3):
            path = f"/v1/hosts/{name}/watch?since={self.versions[i]}&timeout=10"
            held = asyncio.ensure_future(watch.request("GET", path, None, self.credentials[i]))
            await asyncio.sleep(0.05)
            if not held.done():
                break  # held: the change below is what wakes it
            status, answer = held.result()  # a change it had not seen yet: hold again
            if status == 200:
                self.versions[i] = int(answer["version"])
        else:
            return None
        changed, _ = await admin.request("POST", f"/v1/hosts/{name}/{action}", {}, ADMIN_TOKEN)
        answered = time.perf_counter()
        status, answer = await held
        woke = time.perf_counter()
        if status == 200:
            self.versions[i] = int(answer["version"])
        if changed != 200:  # no change was made: the watch ended by its hold, not a wake
            return None
        self.closed[i] = action == "close"
        return max(0.0, woke - answered)


async def _probes(ports: list[int]) -> Probes:
    from bench.ha_rig import JOIN_TOKEN

    names, creds, versions, conns = [], [], [], []
    for i in range(PROBES):
        name = f"probe{i}"
        watch = Conn("127.0.0.1", ports[(i + 1) % len(ports)])
        admin = Conn("127.0.0.1", ports[i % len(ports)])
        status, answer = await admin.request(
            "POST", "/v1/join", {"host": name, "instance_id": f"i-probe-{i}"}, JOIN_TOKEN
        )
        if status != 200:
            raise SystemExit(f"bench: probe join answered {status}: {answer}")
        names.append(name)
        creds.append(str(answer["credential"]))
        versions.append(int(answer["version"]))
        conns += [watch, admin]
    return Probes(ports, names, creds, versions, conns, [False] * len(names))


async def _appends(
    ports: list[int], pids: list[int], store: str, seconds: float, writers: int = 16
) -> tuple[float, float, float]:
    """Writers expecting instances through every replica for `seconds`: facts stored per
    second, and CPU seconds of the replicas and of the database per fact."""
    head0 = _head(store)
    cpu0 = _cpu(pids)
    began = time.perf_counter()
    until = began + seconds

    async def writer(w: int) -> None:
        conn = Conn("127.0.0.1", ports[w % len(ports)])
        n = 0
        while time.perf_counter() < until:
            n += 1
            body = {"instance_id": f"i-append-{w}-{n}", "template": "default"}
            status, _ = await conn.request("POST", "/v1/expected", body, ADMIN_TOKEN)
            if status == 503:
                await asyncio.sleep(0.05)
        conn.close()

    await asyncio.gather(*(writer(w) for w in range(writers)))
    took = time.perf_counter() - began
    cpu1 = _cpu(pids)
    facts = max(1, _head(store) - head0)
    return facts / took, (cpu1[0] - cpu0[0]) / facts, (cpu1[1] - cpu0[1]) / facts


def _reload_seconds(store: str) -> float:
    opened = open_store(store)
    try:
        began = time.perf_counter()
        opened.load()
        return time.perf_counter() - began
    finally:
        opened.close()


def _head(store: str) -> int:
    opened = open_store(store)
    try:
        return int(opened.last_seq())
    finally:
        opened.close()


def _ms(value: float) -> str:
    return f"{value * 1000:.1f} ms"


def _verdict(figure: float, bound: float) -> str:
    return "met" if figure < bound else "MISSED"


def _latency(label: str, phases: list[Phase], targets: list[str]) -> list[list[str]]:
    def cells(get: object) -> list[str]:
        return [get(p.samples) for p in phases]  # type: ignore[operator]

    def lat(s: Samples, pct: float) -> float:
        return percentile(s.latency, pct)

    return [
        [f"{label}: heartbeats", *cells(lambda s: f"{len(s.latency):,} ({s.errors} errors)"), ""],
        [
            f"{label}: p50 / p99",
            *cells(lambda s: f"{_ms(lat(s, 50))} / {_ms(lat(s, 99))}"),
            targets[0],
        ],
        [f"{label}: max", *cells(lambda s: _ms(max(s.latency, default=0.0))), ""],
        [
            f"{label}: worst second p99 / max",
            *cells(lambda s: f"{_ms(window_p99(s))} / {_ms(worst_window(s))}"),
            "",
        ],
        [
            f"{label}: generator send lag p99 / stall",
            *cells(lambda s: f"{_ms(percentile(s.send_lag, 99))} / {_ms(s.stall)}"),
            "the client's own lateness",
        ],
    ]


def _targets(sqlite: Size, pg: Size, phase: str) -> list[str]:
    s = getattr(sqlite, phase).samples
    p = getattr(pg, phase).samples
    out = []
    today = TODAY.get(sqlite.hosts)
    if today is not None and phase == "staggered":
        ratio = percentile(s.latency, 99) * 1000 / today
        verdict = "met" if ratio <= 1.2 else "MISSED"
        out.append(f"SQLite <= 1.2x {today} ms (an earlier run's): {ratio:.2f}x {verdict}")
    if pg.hosts >= 10000:
        p99 = percentile(p.latency, 99)
        out.append(f"PG p99 < 100 ms: {_verdict(p99, 0.1)}")
    return ["; ".join(out)]


def _render(modes: list[Mode], plan: Plan) -> str:
    sqlite, pg = modes
    rows: list[list[str]] = []
    for a, b in zip(sqlite.sizes, pg.sizes):
        n = f"{a.hosts:,}"
        rows.append(
            [
                f"{n} hosts: joins/s (503s retried)",
                *(f"{s.joins:,.0f}/s ({s.busy})" for s in (a, b)),
                "",
            ]
        )
        rows += _latency(f"{n}, staggered", [a.staggered, b.staggered], _targets(a, b, "staggered"))
        rows += _latency(f"{n}, in phase", [a.phased, b.phased], _targets(a, b, "phased"))
        wakes = [[w * 1000 for w in s.staggered.wakes] for s in (a, b)]
        p99 = percentile(wakes[1], 99)
        rows.append(
            [
                f"{n}: wake p50 / p99 / max (count)",
                *(
                    f"{percentile(w, 50):.1f} / {percentile(w, 99):.1f} / "
                    f"{max(w, default=0):.1f} ms ({len(w)})"
                    for w in wakes
                ),
                f"PG cross-replica p99 < 50 ms: {_verdict(p99, 50)}",
            ]
        )
        rows.append(
            [
                f"{n}: CPU per heartbeat, replicas / database",
                *(_per_beat(s) for s in (a, b)),
                "staggered phase, whole processes",
            ]
        )
        rows.append(
            [
                f"{n}: whole state read (a reload)",
                *(f"{s.reload * 1000:.0f} ms" for s in (a, b)),
                "on each change refused as stale",
            ]
        )
        rows.append(
            [
                f"{n}: RSS per replica, watches open ({a.watched:,})",
                *(" / ".join(f"{r:.0f}" for r in s.rss) + " MB" for s in (a, b)),
                "",
            ]
        )
    rows.append(["fact appends/s, 16 writers", *(f"{m.appends:,.0f}/s" for m in modes), ""])
    rows.append(
        [
            "CPU per append, replicas / database",
            *(
                f"{m.append_cpu_replicas * 1000:.2f} / {m.append_cpu_db * 1000:.2f} ms"
                for m in modes
            ),
            "",
        ]
    )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    title = (
        f"Controller replicas (open loop, every {plan.interval:g} s per host, watches open, "
        f"{plan.seconds:g} s staggered, {plan.phased:g} s in phase), "
        f"{time.strftime('%Y-%m-%d')}, load average {load} on {os.cpu_count()} cores"
    )
    return table(title, ["measure", sqlite.label, pg.label, "target"], rows)


def _per_beat(size: Size) -> str:
    beats = max(1, len(size.staggered.samples.latency))
    replicas = size.staggered.cpu_replicas / beats * 1000
    db = size.staggered.cpu_db / beats * 1000
    return f"{replicas:.2f} / {db:.2f} ms"
