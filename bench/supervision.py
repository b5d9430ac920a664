"""xce-agent's supervision against supervisord, on the same child, in the same run.

Restart latency is the time from a crashing child's last instruction to its replacement's
first (both logged by the child itself with CLOCK_MONOTONIC); stop latency is from the stop
request to the supervisor having seen the child gone; idle cost is a running supervisor
with one sleeping component over a fixed window.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench import Skipped
from bench.stats import percentile, ratio, table
from xce_agent.supervision.machine import Phase
from xce_agent.supervision.reactor import Reactor
from xce_agent.supervision.spec import ComponentSpec
from xce_agent.supervision.supervisor import Supervisor

HERE = Path(__file__).resolve().parent
BENCH_VENV = HERE / ".venv"


def build_child(workdir: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise Skipped("a C compiler (cc) is needed for the benchmark child")
    out = workdir / "crasher"
    subprocess.run([cc, "-O2", "-o", str(out), str(HERE / "crasher.c")], check=True)
    return out


def supervisord_bin() -> Path:
    path = BENCH_VENV / "bin" / "supervisord"
    if not path.exists():
        raise Skipped("supervisord, the peer, is missing: `make bench` installs it in bench/.venv")
    return path


def restart_gaps(log: Path) -> list[float]:
    """Milliseconds between each crash ('E') and the next start ('S')."""
    gaps, last_exit = [], None
    for line in log.read_text().splitlines():
        tag, ns, _pid = line.split()
        if tag == "E":
            last_exit = int(ns)
        elif last_exit is not None:
            gaps.append((int(ns) - last_exit) / 1e6)
            last_exit = None
    return gaps


def wait_starts(log: Path, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and log.read_text().count("S ") > count:
            return
        time.sleep(0.05)
    raise SystemExit(f"bench: fewer than {count} restarts within {timeout:.0f}s")


def agent_config(workdir: Path, command: Path, env: dict[str, str], crash: bool) -> Path:
    restart = (
        "        restart: {initial_delay: 0, delay: 0, max_delay: 0,"
        " give_up: {starts: 10000, window: 1s}}\n"
        if crash
        else ""
    )
    envs = "".join(f"          {k}: {v}\n" for k, v in env.items())
    path = workdir / "agent.yaml"
    path.write_text(
        "version: 1\ninstance: {id: bench}\nroles:\n  worker:\n    components:\n"
        f"      child:\n        command: [{command}]\n        environment:\n{envs}{restart}"
        f"state_directory: {workdir / 'state'}\nlog_level: warning\n"
    )
    return path


def start_agent(config: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "xce_agent", "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_agent(agent: subprocess.Popen[bytes]) -> None:
    agent.send_signal(signal.SIGUSR2)
    try:
        agent.wait(timeout=20)
    except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait()


def supervisord_conf(workdir: Path, command: Path, env: dict[str, str], autostart: bool) -> Path:
    envs = ",".join(f'{k}="{v}"' for k, v in env.items())
    path = workdir / "supervisord.conf"
    path.write_text(
        f"[unix_http_server]\nfile={workdir / 'sv.sock'}\n"
        f"[supervisord]\nnodaemon=true\nlogfile={workdir / 'sv.log'}\n"
        f"pidfile={workdir / 'sv.pid'}\nloglevel=warn\n"
        "[rpcinterface:supervisor]\n"
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n"
        f"[program:{'crasher' if autostart else 'waiter'}]\ncommand={command}\n"
        f"autostart={'true' if autostart else 'false'}\nautorestart=true\nstartsecs=0\n"
        f"startretries=1000000\nenvironment={envs}\nstopwaitsecs=10\n"
    )
    return path


def start_supervisord(conf: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(supervisord_bin()), "-c", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_proc(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def xce_restarts(child: Path, count: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        log = workdir / "starts.log"
        agent = start_agent(agent_config(workdir, child, {"BENCH_LOG": str(log)}, crash=True))
        try:
            wait_starts(log, count, 60)
        finally:
            stop_agent(agent)
        return restart_gaps(log)[:count]


def supervisord_restarts(child: Path, count: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        log = workdir / "starts.log"
        conf = supervisord_conf(workdir, child, {"BENCH_LOG": str(log)}, autostart=True)
        proc = start_supervisord(conf)
        try:
            wait_starts(log, count, count * 2.5 + 30)
        finally:
            stop_proc(proc)
        return restart_gaps(log)[:count]


def xce_stops(child: Path, count: int) -> list[float]:
    spec = ComponentSpec("child", (str(child),), environment={"BENCH_WAIT": "1"})
    reactor = Reactor()
    sup = Supervisor([spec], reactor)
    latencies = []

    def until(phase: Phase) -> None:
        while sup.state("child").phase is not phase:
            reactor.run_once(max_wait=1.0)

    for _ in range(count):
        sup.start("child")
        until(Phase.RUNNING)
        time.sleep(0.01)  # let the child reach pause()
        began = time.perf_counter()
        sup.stop("child")
        until(Phase.STOPPED)
        latencies.append((time.perf_counter() - began) * 1000)
    sup.close()
    reactor.close()
    return latencies


def supervisord_stops(child: Path, count: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        proc = start_supervisord(supervisord_conf(workdir, child, {"BENCH_WAIT": "1"}, False))
        try:
            out = subprocess.run(
                [
                    str(BENCH_VENV / "bin" / "python"),
                    str(HERE / "sv_stop.py"),
                    str(workdir / "sv.sock"),
                    str(count),
                ],
                capture_output=True,
                text=True,
                check=False,
                timeout=count * 5 + 30,
            )
            if out.returncode != 0:
                raise SystemExit(f"bench: supervisord stop run failed: {out.stderr[-600:]}")
        finally:
            stop_proc(proc)
    return [float(x) for x in json.loads(out.stdout)]


@dataclass
class Idle:
    rss_mb: float
    uss_mb: float
    cpu_ms: float
    wakeups: int


def wakeups(pid: int) -> int:
    """Voluntary context switches summed over every thread of `pid` (each one a sleep that
    ended: a timer, a readable file, a futex): /proc/PID/status alone counts the main
    thread only."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue  # the thread ended meanwhile
        for line in text.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


def snapshot(pid: int) -> tuple[float, int, float, float]:
    proc = psutil.Process(pid)
    cpu = proc.cpu_times()
    mem = proc.memory_full_info()
    return cpu.user + cpu.system, wakeups(pid), mem.rss, mem.uss


def idle_costs(child: Path, seconds: float) -> tuple[Idle, Idle]:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        env = {"BENCH_WAIT": "1"}
        agent = start_agent(agent_config(Path(a), child, env, crash=False))
        sv = start_supervisord(supervisord_conf(Path(b), child, env, True))
        try:
            time.sleep(3)  # both settle: imports done, child started
            before = {p.pid: snapshot(p.pid) for p in (agent, sv)}
            time.sleep(seconds)
            after = {p.pid: snapshot(p.pid) for p in (agent, sv)}
        finally:
            stop_agent(agent)
            stop_proc(sv)

    def idle(pid: int) -> Idle:
        (c0, w0, _, _), (c1, w1, rss, uss) = before[pid], after[pid]
        return Idle(rss / 2**20, uss / 2**20, (c1 - c0) * 1000, w1 - w0)

    return idle(agent.pid), idle(sv.pid)


def run(restarts: int = 100, stops: int = 30, idle_seconds: float = 60.0) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        child = build_child(Path(tmp))
        ours_r = xce_restarts(child, restarts)
        theirs_r = supervisord_restarts(child, restarts)
        ours_s = xce_stops(child, stops)
        theirs_s = supervisord_stops(child, stops)
        ours_i, theirs_i = idle_costs(child, idle_seconds)
    ms = "{:.2f} ms".format
    rows = [
        [
            f"restart p50 ({len(ours_r)}/{len(theirs_r)} restarts)",
            ms(percentile(ours_r, 50)),
            ms(percentile(theirs_r, 50)),
            ratio(percentile(ours_r, 50), percentile(theirs_r, 50)),
            "<= 3 ms",
        ],
        [
            "restart p95",
            ms(percentile(ours_r, 95)),
            ms(percentile(theirs_r, 95)),
            ratio(percentile(ours_r, 95), percentile(theirs_r, 95)),
            "<= 10 ms",
        ],
        [
            f"graceful stop p50 ({stops} stops)",
            ms(percentile(ours_s, 50)),
            ms(percentile(theirs_s, 50)),
            ratio(percentile(ours_s, 50), percentile(theirs_s, 50)),
            "<= 3 ms",
        ],
        [
            f"idle RSS ({idle_seconds:.0f} s)",
            f"{ours_i.rss_mb:.1f} MB",
            f"{theirs_i.rss_mb:.1f} MB",
            ratio(ours_i.rss_mb, theirs_i.rss_mb),
            "<= 33 MB",
        ],
        [
            "idle USS",
            f"{ours_i.uss_mb:.1f} MB",
            f"{theirs_i.uss_mb:.1f} MB",
            ratio(ours_i.uss_mb, theirs_i.uss_mb),
            "",
        ],
        [
            "idle CPU time",
            f"{ours_i.cpu_ms:.0f} ms",
            f"{theirs_i.cpu_ms:.0f} ms",
            ratio(ours_i.cpu_ms, theirs_i.cpu_ms),
            "",
        ],
        [
            "idle wakeups (voluntary switches, all threads)",
            f"{ours_i.wakeups} ({ours_i.wakeups * 60 / idle_seconds:.0f}/min)",
            f"{theirs_i.wakeups} ({theirs_i.wakeups * 60 / idle_seconds:.0f}/min)",
            ratio(ours_i.wakeups, theirs_i.wakeups),
            "no controller: 0",
        ],
    ]
    header = ["measure", "xce-agent", "supervisord", "supervisord/xce-agent", "target"]
    when = time.strftime("%Y-%m-%d")
    return table(f"Supervision, {when}, {os.cpu_count()} cores", header, rows)
