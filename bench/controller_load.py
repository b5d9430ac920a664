"""Controller load, open loop: joins, heartbeats with watches held open, idle cost, memory.

The controller runs as its own process (`xce-controller serve`) on loopback. The load
generator (bench/loadgen.py) is this process: asyncio on raw sockets, one heartbeat and one
watch connection per simulated host, each host heartbeating on its own schedule; latency is
taken from the scheduled time. Both share the machine's cores, as they would not in
production, and the generator's own lateness (send lag, longest stall of its loop) is printed
so it can be told apart.
"""

from __future__ import annotations

import asyncio
import functools
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from bench.loadgen import Fleet, Samples, window_p99, worst_window
from bench.stats import percentile, table

PHASED_SECONDS = 45.0  # past every first hold's end (at most the 30 s asked) and into the next
IDLE_SECONDS = 10.0  # the idle CPU's window, every host joined
SETTLE_SECONDS = 2.0  # after the last join, before the idle window
JOIN_TOKEN = "bench-join-token-0123456789"  # noqa: S105 - a throwaway cluster's
CONFIG = f"""\
version: 1
heartbeat_interval: 10s
host_loss_grace: 300s
unmatched_joins: accept
auth: {{join_token: {JOIN_TOKEN}}}
templates:
  default: {{slots: 4}}
"""


def start_controller(workdir: Path) -> tuple[subprocess.Popen[bytes], str, int]:
    port_file = workdir / "port"
    cluster = workdir / "cluster.yaml"
    cluster.write_text(CONFIG)
    port_file.unlink(missing_ok=True)
    wrap = os.environ.get("BENCH_CONTROLLER_WRAP")
    argv = [
        sys.executable,
        *([wrap] if wrap else ["-m", "xce_controller"]),
        "serve",
        "--db",
        str(workdir / "db"),
    ]
    argv += ["--config", str(cluster), "--listen", "127.0.0.1:0", "--port-file", str(port_file)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if port_file.exists() and port_file.read_text().strip():
            port = int(port_file.read_text().strip())
            try:
                requests.get(f"http://127.0.0.1:{port}/v1/info", timeout=1)
                return proc, f"http://127.0.0.1:{port}", port
            except requests.ConnectionError:
                pass
        time.sleep(0.05)
    raise SystemExit("bench: controller did not start")


def run_loop(main: Coroutine[Any, Any, Result]) -> Result:
    """uvloop when installed (as the controller uses), so the client costs less CPU."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def raise_fd_limit(wanted: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for limit in (max(wanted, hard), hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
            return limit
        except (ValueError, OSError):
            continue
    return soft


@dataclass(frozen=True)
class Result:
    joins_first: float
    joins_last: float
    block: int
    small: Samples
    big: Samples
    rss: float
    idle: float
    phased: Samples  # `half` hosts whose watches all started within one second
    phased_seconds: float


def run(hosts: int = 10_000, seconds: float = 30.0, interval: float = 10.0) -> str:
    limit = raise_fd_limit(2 * hosts + 1024)  # the controller inherits it
    # One heartbeat connection per host, plus one watch connection for as many as the file
    # descriptor limit leaves room for (the controller holds one socket per connection).
    watched = max(0, min(hosts, limit - hosts - 512))
    half = hosts // 2
    with tempfile.TemporaryDirectory() as tmp:
        procs = [start_controller(Path(tmp))[0]]

        def restart() -> tuple[int, int]:
            """The same database under a new process: no watch held, every agent reconnects."""
            procs[-1].terminate()
            procs[-1].wait()
            proc, _, port = start_controller(Path(tmp))
            procs.append(proc)
            return proc.pid, port

        port = int((Path(tmp) / "port").read_text())
        try:
            result = run_loop(
                _measure(procs[0].pid, port, restart, half, hosts, watched, interval, seconds)
            )
        finally:
            procs[-1].terminate()
            procs[-1].wait()
    return _render(result, half, hosts, watched, interval, seconds)


async def _measure(
    pid: int,
    port: int,
    restart: Callable[[], tuple[int, int]],
    half: int,
    hosts: int,
    watched: int,
    interval: float,
    seconds: float,
) -> Result:
    fleet = Fleet("127.0.0.1", port, JOIN_TOKEN)
    began = time.perf_counter()
    finished = await fleet.join_all(0, half)
    finished += await fleet.join_all(half, hosts)
    block = max(1, hosts // 5)
    first = block / (finished[block - 1] - began)
    last = block / (finished[-1] - finished[-block - 1])
    await asyncio.sleep(SETTLE_SECONDS)
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    await asyncio.sleep(IDLE_SECONDS)  # every host joined, nothing happening
    idle = (cpu_seconds(pid) - cpu0) / (time.perf_counter() - t0)
    await fleet.start_watches(range(half))
    cpu = functools.partial(cpu_seconds, pid)
    small = await fleet.heartbeats(range(half), interval, seconds, seed=1, server_cpu=cpu)
    await fleet.start_watches(range(half, watched))
    rss_watched = rss_mb(pid)
    big = await fleet.heartbeats(range(hosts), interval, seconds, seed=2, server_cpu=cpu)
    await fleet.stop_watches()
    # In phase: the controller restarted (nothing held from before) and every watch started
    # within one second; measured past the first end of every hold (at most the 30 s asked).
    fleet.close()
    pid, fleet.port = restart()
    await fleet.start_watches(range(half), per_second=max(half, 1), in_phase=True)
    long = max(seconds, PHASED_SECONDS)
    cpu = functools.partial(cpu_seconds, pid)
    phased = await fleet.heartbeats(range(half), interval, long, seed=3, server_cpu=cpu)
    await fleet.stop_watches()
    fleet.close()
    return Result(first, last, block, small, big, rss_watched, idle, phased, long)


def _latency_rows(label: str, s: Samples, p99_target: str, window_target: str) -> list[list[str]]:
    ms = "{:.1f} ms".format
    lat = [x * 1000 for x in s.latency]
    lag = [x * 1000 for x in s.send_lag]
    return [
        [f"{label}: heartbeats", f"{len(lat):,} ({s.errors} errors)", "", ""],
        [
            f"{label}: p50 / p99 from schedule",
            f"{ms(percentile(lat, 50))} / {ms(percentile(lat, 99))}",
            p99_target,
            "",
        ],
        [
            f"{label}: p99.9 / max",
            f"{ms(percentile(lat, 99.9))} / {ms(max(lat, default=0))}",
            "",
            "",
        ],
        [
            f"{label}: worst 1-s window p99 / max",
            f"{ms(window_p99(s) * 1000)} / {ms(worst_window(s) * 1000)}",
            window_target,
            "",
        ],
        [
            f"{label}: generator send lag p99 / loop stall max",
            f"{ms(percentile(lag, 99))} / {ms(s.stall * 1000)}",
            "",
            "the client's own lateness",
        ],
        [
            f"{label}: watch answers/s, mean / busiest second",
            f"{s.watch_rate:,.0f} / {s.watch_peak:,}",
            "",
            "",
        ],
        [
            f"{label}: CPU, controller / generator",
            f"{s.server_cpu:.2f} / {s.client_cpu:.2f} cores",
            "",
            "both on the same cores",
        ],
    ]


def _render(r: Result, half: int, hosts: int, watched: int, interval: float, seconds: float) -> str:
    first, last, block = r.joins_first, r.joins_last, r.block
    rows = [
        [f"joins/s, first {block:,} of {hosts:,}", f"{first:,.0f}/s", "", ""],
        [f"joins/s, last {block:,}", f"{last:,.0f}/s ({last / first:.0%} of first)", ">= 80 %", ""],
        *_latency_rows(f"{half:,} hosts", r.small, "p99 < 50 ms", "< 100 ms"),
        *_latency_rows(
            f"{half:,} hosts, watches in phase ({r.phased_seconds:g} s)",
            r.phased,
            "p99 < 50 ms",
            "< 100 ms",
        ),
        *_latency_rows(f"{hosts:,} hosts", r.big, "p99 < 100 ms", ""),
        [f"watches held open with {hosts:,} hosts", f"{watched:,}", "", "file descriptor limit"],
        [f"controller RSS, {hosts:,} hosts, watches open", f"{r.rss:.0f} MB", "", ""],
        [
            f"controller idle CPU, {hosts:,} hosts",
            f"{r.idle * 100:.2f} % of a core",
            "near 0",
            f"joined, no traffic, {IDLE_SECONDS:g} s",
        ],
    ]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    title = (
        f"Controller load (open loop, every {interval:g} s per host, watches open, "
        f"{seconds:g} s per phase), {time.strftime('%Y-%m-%d')}, load average {load} "
        f"on {os.cpu_count()} cores"
    )
    return table(title, ["measure", "figure", "target", "note"], rows)
