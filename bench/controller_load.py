"""Controller load: joins per second and heartbeat latency, many hosts, one controller.

The controller runs as its own process (`xce-controller serve`) on loopback; clients are
threads in this process, so both share the machine's 2 cores, as they would not in
production: the figures are a floor.
"""

from __future__ import annotations

import multiprocessing
import random
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from bench.stats import percentile, table


def start_controller(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port_file = workdir / "port"
    cluster = workdir / "cluster.yaml"
    cluster.write_text(
        "version: 1\nheartbeat_interval: 10s\nhost_loss_grace: 120s\n"
        "templates:\n  default: {slots: 4}\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "xce_controller",
            "serve",
            "--db",
            str(workdir / "db"),
            "--config",
            str(cluster),
            "--listen",
            "127.0.0.1:0",
            "--port-file",
            str(port_file),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if port_file.exists() and port_file.read_text().strip():
            url = f"http://127.0.0.1:{port_file.read_text().strip()}"
            try:
                requests.get(url + "/v1/info", timeout=1)
                return proc, url
            except requests.ConnectionError:
                pass
        time.sleep(0.05)
    raise SystemExit("bench: controller did not start")


_local = threading.local()


def session() -> requests.Session:
    if not hasattr(_local, "session"):
        _local.session = requests.Session()
    s: requests.Session = _local.session
    return s


def join(url: str, i: int) -> float:
    began = time.perf_counter()
    r = session().post(
        f"{url}/v1/join", json={"host": f"load{i:05d}", "instance_id": f"i-load-{i}"}, timeout=30
    )
    r.raise_for_status()
    return time.perf_counter() - began


def heartbeat(url: str, i: int) -> float:
    began = time.perf_counter()
    r = session().post(
        f"{url}/v1/hosts/load{i:05d}/heartbeat",
        json={
            "agent_state": "running",
            "components": [{"name": "worker", "state": "running", "pid": 100 + i}],
        },
        timeout=30,
    )
    r.raise_for_status()
    return time.perf_counter() - began


def run(hosts: int = 5000, interval: float = 10.0, seconds: float = 20.0) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_controller(Path(tmp))
        try:
            with ThreadPoolExecutor(32) as pool:
                began = time.perf_counter()
                list(pool.map(lambda i: join(url, i), range(2000)))
                joins_2000 = time.perf_counter() - began
                list(pool.map(lambda i: join(url, i), range(2000, hosts)))
                latencies = paced_heartbeats(pool, url, hosts, interval, seconds)
        finally:
            proc.terminate()
            proc.wait()
    ms = "{:.1f} ms".format
    rows = [
        ["2,000 joins", f"{joins_2000:.1f} s ({2000 / joins_2000:,.0f}/s)", "< 60 s"],
        [
            f"heartbeat p50 ({hosts} hosts, {interval:g} s interval)",
            ms(percentile(latencies, 50) * 1000),
            "",
        ],
        ["heartbeat p99", ms(percentile(latencies, 99) * 1000), "< 100 ms"],
        ["heartbeats sent", f"{len(latencies):,} in {seconds:g} s", ""],
    ]
    return table(
        f"Controller load, {time.strftime('%Y-%m-%d')}", ["measure", "figure", "target"], rows
    )


def paced_heartbeats(
    pool: ThreadPoolExecutor, url: str, hosts: int, interval: float, seconds: float
) -> list[float]:
    """Each host heartbeats once per interval at a random phase, for `seconds`.

    The hosts are split over client processes, each sending its share in time order on one
    keep-alive connection, so client-side GIL contention does not pass for server latency.
    """
    procs = 4
    with multiprocessing.get_context("fork").Pool(procs) as mp:
        parts = mp.starmap(
            _client, [(url, range(k, hosts, procs), interval, seconds, k) for k in range(procs)]
        )
    return [x for part in parts for x in part]


def _client(url: str, hosts: range, interval: float, seconds: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    schedule = sorted(
        (rng.uniform(0, interval) + k * interval, i)
        for i in hosts
        for k in range(int(seconds / interval) + 1)
    )
    start = time.perf_counter()
    latencies = []
    for at, i in schedule:
        if at >= seconds:
            break
        delay = start + at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        latencies.append(heartbeat(url, i))
    return latencies
