"""Decommission latency: the admin's decommission request -> the worker's SIGTERM.

Each run starts a real agent process for a fresh idle instance against an embedded controller
on loopback; the worker stamps CLOCK_MONOTONIC when SIGTERM arrives. The clock starts when the
admin request (what `xcecli decommission` sends) leaves, so the controller's whole share (its
decision, the fsync, waking the watch) is inside the figure; the time from the durable fact
is printed too. The peer is what heartbeat-only detection would give: half the heartbeat
interval on average.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from bench.stats import percentile, table

WORKER = """\
import signal, sys, time
def term(signum, frame):
    with open(sys.argv[1], "w") as handle:
        handle.write(repr(time.monotonic()))
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
while True:
    time.sleep(3600)
"""


def run(runs: int = 50) -> str:
    from xce_controller.core.config import load_cluster_config
    from xce_controller.http.server import EmbeddedController

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "worker.py").write_text(WORKER)
        cluster = workdir / "cluster.yaml"
        cluster.write_text(
            "version: 1\nheartbeat_interval: 10s\nhost_loss_grace: 60s\n"
            "templates:\n  default: {slots: 1}\n"
        )
        cfg = load_cluster_config(cluster)
        ec = EmbeddedController(cfg, workdir / "ctl.db").start()
        recorded: dict[str, float] = {}
        original = ec.controller.store.commit

        def commit(facts: Any, *args: Any) -> None:
            original(facts, *args)
            for fact in facts:
                if fact.kind == "state" and fact.data.get("state") == "decommissioned":
                    recorded[fact.data["key"]] = time.monotonic()

        ec.controller.store.commit = commit  # type: ignore[method-assign,assignment]
        try:
            pairs = [one_run(ec.url, ec.admin_headers, workdir, i, recorded) for i in range(runs)]
        finally:
            ec.stop()
    latencies = [a for a, _ in pairs]
    durable = [d for _, d in pairs]
    peer = cfg.heartbeat_interval / 2 * 1000
    ms = "{:.1f} ms".format
    rows = [
        [
            f"admin request -> SIGTERM p50 ({runs} runs)",
            ms(percentile(latencies, 50)),
            ms(peer),
            f"{peer / percentile(latencies, 50):,.0f}x",
            "< 20 ms",
        ],
        ["admin request -> SIGTERM p95", ms(percentile(latencies, 95)), ms(peer * 1.9), "", ""],
        ["admin request -> SIGTERM max", ms(max(latencies)), ms(peer * 2), "", ""],
        ["durable fact -> SIGTERM p50", ms(percentile(durable, 50)), "", "", ""],
    ]
    header = ["measure", "watch (xce-agent)", "heartbeat-only (10 s, modelled)", "ratio", "target"]
    return table(f"Decommission latency, {time.strftime('%Y-%m-%d')}", header, rows)


def one_run(
    url: str, admin: dict[str, str], workdir: Path, index: int, recorded: dict[str, float]
) -> tuple[float, float]:
    instance, host = f"i-bench-{index}", f"bench{index}"
    run_dir = workdir / host
    run_dir.mkdir()
    stamp = run_dir / "sigterm"
    token = requests.post(
        f"{url}/v1/expected",
        headers=admin,
        json={
            "instance_id": instance,
            "template": "default",
            "expected_name": host,
            "mint_join_token": True,
        },
        timeout=10,
    ).json()["join_token"]
    config = run_dir / "agent.yaml"
    config.write_text(
        f"version: 1\ncontroller: {{url: '{url}', token: '{token}'}}\n"
        f"instance: {{id: {instance}, host_name: {host}}}\n"
        "roles:\n  worker:\n    components:\n      worker:\n"
        f"        command: ['{sys.executable}', '{workdir / 'worker.py'}', '{stamp}']\n"
        f"state_directory: '{run_dir / 'state'}'\nlog_level: warning\n"
    )
    agent = subprocess.Popen(
        [sys.executable, "-m", "xce_agent", "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait(
            lambda: (
                (run_dir / "state" / "state.json").exists()
                and '"phase": "running"' in (run_dir / "state" / "state.json").read_text()
            )
        )
        time.sleep(0.3)  # the worker installs its handler; the agent's watch is waiting
        began = time.monotonic()
        requests.post(f"{url}/v1/hosts/{host}/decommission", json={}, headers=admin, timeout=10)
        wait(lambda: stamp.exists() and stamp.read_text())
        at = float(stamp.read_text())
        return (at - began) * 1000, (at - recorded[instance]) * 1000
    finally:
        agent.send_signal(signal.SIGUSR2)
        agent.wait(timeout=20)


def wait(check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("bench: a decommission run did not complete")
        time.sleep(0.01)
