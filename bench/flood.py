"""An output flood beside a crashing component: does the flood delay the crasher's restarts?

One real `xce-agent run` supervises the benchmark crasher (exit 1 at once, restarted at
once) alone, then beside `yes` (a newline flood), then beside a flood without newlines.
Restart latency is from the crasher's last instruction to its replacement's first (both
logged by the child with CLOCK_MONOTONIC). The agent's peak RSS is sampled throughout.
Target: with a flood, the restart latency stays within 2x of the quiet run and RSS bounded.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from bench.stats import percentile, table
from bench.supervision import build_child, restart_gaps, wait_starts

FLOODS = {
    "quiet": None,
    "yes flood": ["yes"],
    "no-newline flood": ["/bin/sh", "-c", "tr '\\000' x < /dev/zero"],
}


def _config(workdir: Path, child: Path, log: Path, flood: list[str] | None) -> Path:
    text = (
        "version: 1\ninstance: {id: bench}\nroles:\n  worker:\n    components:\n"
        f"      crasher:\n        command: [{child}]\n"
        f"        environment: {{BENCH_LOG: {log}}}\n"
        "        restart: {initial_delay: 0, delay: 0, max_delay: 0,"
        " give_up: {starts: 10000, window: 1s}}\n"
    )
    if flood:
        words = ", ".join(repr(w) for w in flood)
        text += f"      flood:\n        command: [{words}]\n"
    text += f"state_directory: {workdir / 'state'}\nlog_level: info\n"
    path = workdir / "agent.yaml"
    path.write_text(text)
    return path


def _peak_rss(pid: int, stop: threading.Event, out: list[float]) -> None:
    proc = psutil.Process(pid)
    while not stop.wait(0.05):
        try:
            out.append(proc.memory_info().rss / 2**20)
        except psutil.Error:
            return


def measure(child: Path, flood: list[str] | None, restarts: int) -> tuple[list[float], float]:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        log = workdir / "starts.log"
        agent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "xce_agent",
                "run",
                "--config",
                str(_config(workdir, child, log, flood)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        stop, samples = threading.Event(), [0.0]
        sampler = threading.Thread(target=_peak_rss, args=(agent.pid, stop, samples))
        sampler.start()
        try:
            time.sleep(1.0)  # the flood is in full swing before we count
            log.unlink(missing_ok=True)
            wait_starts(log, restarts, 120)
        finally:
            stop.set()
            sampler.join()
            agent.send_signal(signal.SIGUSR2)
            try:
                agent.wait(timeout=30)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
        return restart_gaps(log)[:restarts], max(samples)


def run(restarts: int = 300) -> str:
    if shutil.which("yes") is None:
        sys.exit("bench: `yes` is needed for the flood benchmark")
    with tempfile.TemporaryDirectory() as tmp:
        child = build_child(Path(tmp))
        results = {name: measure(child, argv, restarts) for name, argv in FLOODS.items()}
    quiet_gaps, quiet_rss = results["quiet"]
    rows = []
    for name, (gaps, rss) in results.items():
        p50, p95 = percentile(gaps, 50), percentile(gaps, 95)
        rows.append(
            [
                f"{name} ({len(gaps)} restarts)",
                f"{p50:.2f} ms",
                f"{p95:.2f} ms",
                f"{p50 / percentile(quiet_gaps, 50):.2f}x",
                f"{p95 / percentile(quiet_gaps, 95):.2f}x",
                f"{rss:.1f} MB",
            ]
        )
    header = ["case", "restart p50", "restart p95", "p50 / quiet", "p95 / quiet", "peak RSS"]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    title = (
        f"Output flood beside a crasher, {time.strftime('%Y-%m-%d')}, load average {load} on "
        f"{os.cpu_count()} cores (target: p50 within 2x of quiet, RSS bounded; quiet RSS "
        f"{quiet_rss:.1f} MB)"
    )
    return table(title, header, rows)
