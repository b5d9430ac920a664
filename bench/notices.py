"""Notice latency: a notice appearing in the metadata service -> the host closed at the controller.

A real agent process watches the metadata emulator (tests/metadata_emulator.py) and talks to an
embedded controller on loopback. Each run posts a notice at a random phase of the agent's poll,
stamps CLOCK_MONOTONIC when the emulator serves it, and stamps again when the controller's
`closed` fact is durable; then the notice is withdrawn and the host reopens for the next run.
Measured side by side in the same run: AWS polled every 1 s (the default), GCE by long-poll,
AWS polled every 2 s (aws-node-termination-handler's interval), and heartbeat-loss detection
(the only signal without notices: the instance dies at the deadline and the controller learns
of it a host-loss grace later), measured with a short grace and scaled to the default 60 s.
"""

from __future__ import annotations

import logging
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from bench.stats import percentile, ratio, table

CLUSTER = (
    "version: 1\nheartbeat_interval: {interval}\nhost_loss_grace: {grace}\n"
    "agent_max_restart_backoff: 1s\nrejoin_allowance: 1s\n"
    "templates:\n  default: {{slots: 1}}\n"
)
SPOT_LEAD = 120.0  # AWS: two minutes between the notice and the stop
DEFAULT_GRACE = 60.0
WARMUP_POLLS = 2.0  # polls waited before the first notice, the watch surely running


def run(runs: int = 20, loss: int = 3) -> str:
    from tests.metadata_emulator import Emulator

    rows: list[list[str]] = []
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, Emulator() as emulator:
        workdir = Path(tmp)
        cases: list[tuple[str, str, float]] = [
            ("AWS IMDSv2, 1 s poll (xce-agent)", "aws", 1.0),
            ("GCE long-poll (xce-agent)", "gce", 1.0),
            ("AWS IMDSv2, 2 s poll (node-termination-handler's)", "aws", 2.0),
        ]
        for label, provider, interval in cases:
            results[label] = notice_runs(workdir, emulator, provider, interval, runs)
        lost = loss_runs(workdir, runs=loss)
    ms = "{:,.0f} ms".format
    baseline = percentile(results[cases[0][0]], 50)
    targets = ["p50 < 1.1 s", "p50 < 50 ms", ""]
    for (label, _, _), target in zip(cases, targets):
        values = results[label]
        p50 = percentile(values, 50)
        rows.append([label, ms(p50), ms(percentile(values, 95)), ratio(p50, baseline), target])
    scaled = [v + (SPOT_LEAD + DEFAULT_GRACE - LOSS_GRACE) * 1000 for v in lost]
    rows.append(
        [
            f"heartbeat loss only, modelled: measured at {LOSS_GRACE:g} s grace "
            f"(p50 {ms(percentile(lost, 50))}), scaled to lead {SPOT_LEAD:g} s + grace "
            f"{DEFAULT_GRACE:g} s",
            ms(percentile(scaled, 50)),
            ms(percentile(scaled, 95)),
            ratio(baseline, percentile(scaled, 50)) + " slower",
            "",
        ]
    )
    header = ["notice -> host closed at the controller", "p50", "p95", "vs 1 s poll", "target"]
    title = f"Notice latency ({runs} runs each), {time.strftime('%Y-%m-%d')}"
    return table(title, header, rows) + "\n\n" + spot(quick=runs < 20)


def spot(quick: bool) -> str:
    """The simulator's spot scenario: the same interruptions without and with notices."""
    from xce_controller.sim.spot import SpotScenario, render, run_spot

    spec = SpotScenario(hours=0.5, hosts=20) if quick else SpotScenario()
    began = time.perf_counter()
    without, with_ = run_spot(spec)
    took = time.perf_counter() - began
    return (
        render(spec, without, with_)
        + f"\n(both columns simulated in virtual time; {took:.1f} s wall time for both runs)"
    )


class Stamps:
    """The controller's durable `closed`/`lost` facts, stamped with CLOCK_MONOTONIC."""

    def __init__(self, controller: Any) -> None:
        self.seen: dict[str, list[float]] = {}
        original = controller.store.commit

        def commit(facts: Any, *args: Any) -> None:
            original(facts, *args)
            for fact in facts:
                if fact.kind == "state":
                    self.seen.setdefault(fact.data["state"], []).append(time.monotonic())

        controller.store.commit = commit

    def count(self, state: str) -> int:
        return len(self.seen.get(state, []))

    def last(self, state: str) -> float:
        return self.seen[state][-1]


def embedded(workdir: Path, name: str, grace: float) -> tuple[Any, Stamps]:
    from xce_controller.core.config import load_cluster_config
    from xce_controller.http.server import EmbeddedController

    cluster = workdir / f"{name}.yaml"
    interval = min(10.0, grace / 4)
    cluster.write_text(CLUSTER.format(interval=f"{interval:g}s", grace=f"{grace:g}s"))
    ec = EmbeddedController(load_cluster_config(cluster), workdir / f"{name}.db").start()
    # A stopped agent's watch is still open when its controller stops: not news here (set
    # after uvicorn configured its loggers).
    logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
    return ec, Stamps(ec.controller)


def join_token(ec: Any, name: str) -> str:
    """The controller admits only an expected host with its token (as `xcecli expect`)."""
    answer = requests.post(
        f"{ec.url}/v1/expected",
        headers=ec.admin_headers,
        json={
            "instance_id": f"i-{name}",
            "template": "default",
            "expected_name": name,
            "mint_join_token": True,
        },
        timeout=10,
    )
    answer.raise_for_status()
    return str(answer.json()["join_token"])


def start_agent(workdir: Path, name: str, ec: Any, cloud: str) -> subprocess.Popen[bytes]:
    run_dir = workdir / name
    run_dir.mkdir()
    config = run_dir / "agent.yaml"
    config.write_text(
        f"version: 1\ncontroller: {{url: '{ec.url}', token: '{join_token(ec, name)}'}}\n"
        f"instance: {{id: i-{name}, host_name: {name}}}\n"
        "roles:\n  worker:\n    components:\n      worker:\n"
        f"        command: ['{sys.executable}', '-c', 'import time; time.sleep(3600)']\n"
        f"{cloud}state_directory: '{run_dir / 'state'}'\nlog_level: warning\n"
    )
    return subprocess.Popen(
        [sys.executable, "-m", "xce_agent", "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def notice_runs(
    workdir: Path, emulator: Any, provider: str, interval: float, runs: int
) -> list[float]:
    name = f"{provider}{interval:g}".replace(".", "")
    ec, stamps = embedded(workdir, name, DEFAULT_GRACE)
    cloud = (
        f"cloud: {{provider: {provider}, metadata_url: '{emulator.url}', "
        f"poll_interval: {interval:g}s}}\n"
    )
    agent = start_agent(workdir, name, ec, cloud)
    on, off = notice_values(provider)
    latencies = []
    try:
        wait(lambda: host_state(ec, name) == "open")
        time.sleep(interval * WARMUP_POLLS)  # the watch is running
        for i in range(runs):
            time.sleep(random.uniform(0, interval))  # a random phase of the poll
            closed = stamps.count("closed")
            applied = emulator.change(on())
            wait(lambda c=closed: stamps.count("closed") > c)  # type: ignore[misc]
            latencies.append((stamps.last("closed") - applied.monotonic) * 1000)
            opened = stamps.count("open")
            emulator.change(off)
            wait(lambda o=opened: stamps.count("open") > o)  # type: ignore[misc]
            del i
    finally:
        agent.send_signal(signal.SIGUSR2)
        agent.wait(timeout=20)
        emulator.change(off)
        ec.stop()
    return latencies


def notice_values(provider: str) -> tuple[Callable[[], dict[str, Any]], dict[str, Any]]:
    from tests.metadata_emulator import spot

    if provider == "aws":
        return (lambda: spot(time.time() + SPOT_LEAD)), {"aws.spot": None}
    return (lambda: {"gce.instance/preempted": "TRUE"}), {"gce.instance/preempted": "FALSE"}


LOSS_GRACE = 3.0


def loss_runs(workdir: Path, runs: int) -> list[float]:
    """The instance vanishes (agent and worker SIGKILLed) -> the controller's `lost` fact."""
    latencies = []
    for i in range(runs):
        name = f"loss{i}"
        ec, stamps = embedded(workdir, name, LOSS_GRACE)
        agent = start_agent(workdir, name, ec, "")
        try:
            wait(lambda e=ec, n=name: host_state(e, n) == "open")  # type: ignore[misc]
            time.sleep(random.uniform(0, LOSS_GRACE / 4))
            gone = time.monotonic()
            agent.kill()
            agent.wait()
            wait(lambda s=stamps: s.count("lost") > 0)  # type: ignore[misc]
            latencies.append((stamps.last("lost") - gone) * 1000)
        finally:
            kill_worker(workdir / name / "state" / "state.json")
            ec.stop()
    return latencies


def kill_worker(state: Path) -> None:
    import json
    import os

    try:
        pid = json.loads(state.read_text())["components"][0]["pid"]
        os.killpg(int(pid), signal.SIGKILL)
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        pass


def host_state(ec: Any, name: str) -> str:
    r = requests.get(f"{ec.url}/v1/hosts/{name}", headers=ec.admin_headers, timeout=5)
    return str(r.json().get("state", "")) if r.status_code == 200 else ""


def wait(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("bench: a notice run did not complete")
        time.sleep(0.005)
