"""The never-two checker's rig: random schedules of operator and host actions against real
agents, and a sampler that counts each component's live copies all along.

A lane is one host: a fake controller, a state directory on a small tmpfs (so it can be
filled), and a cgroup the rig owns under which every agent of the lane, and so every
process it starts, runs. A schedule starts a fresh host (containment on or off, drawn),
waits for its worker, then applies 1 to 3 steps drawn from its own seed:

- detach-elsewhere: SIGTERM (components stay), the next agent from another cgroup;
- kill9-agent, kill9-worker, kill9-worker-then-agent: at random points;
- unwritable-ro, unwritable-full: the state directory read-only or full while the worker
  crashes (and maybe the agent is killed -9), then writable again;
- tree-removed: the agent's cgroup tree removed and made again while it is down;
- reload-storm: SIGHUPs in a burst, some after a change of the worker's settings;
- reboot: every process of the host killed and the records made another boot's;
- decommission: the controller refuses the host; its worker must be gone and stay gone.

The sampler reads cgroup.procs of the lane's cgroups every few milliseconds (a set of pids:
a process being moved between two of them counts once) and keeps what breaks "at most one
copy of a component at every sample, and none of the worker after a decommission".
A schedule is named by (seed, index): `describe` and `replay` rebuild it from those alone.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration import never_two as nt
from tests.integration.fake_controller import REFUSAL, FakeController
from tests.integration.helpers import wait_for

STEPS = {
    "detach-elsewhere": 3,
    "kill9-agent": 2,
    "kill9-worker": 2,
    "kill9-worker-then-agent": 2,
    "unwritable-ro": 2,
    "unwritable-full": 2,
    "tree-removed": 2,
    "reload-storm": 2,
    "reboot": 1,
    "decommission": 1,
}
COMPONENTS = ("worker", "sidecar")
SLEEPER = "import time\ntime.sleep(3600)\n"
SETTLE = 30.0  # seconds a host may take to run its worker again after a step


@dataclass(frozen=True)
class Schedule:
    seed: int
    index: int
    contained: bool
    steps: tuple[tuple[str, float], ...]  # (step, a random point in [0, 1) it uses)

    def describe(self) -> str:
        shown = ", ".join(f"{s}@{p:.2f}" for s, p in self.steps)
        how = "contained" if self.contained else "process groups"
        return f"schedule {self.seed}:{self.index} ({how}): {shown}"


def schedule(seed: int, index: int) -> Schedule:
    """Schedule `index` of `seed`: always the same one."""
    rnd = random.Random(f"{seed}:{index}")  # noqa: S311 - a reproducible schedule
    kinds, weights = list(STEPS), list(STEPS.values())
    steps = tuple((rnd.choices(kinds, weights)[0], rnd.random()) for _ in range(rnd.randint(1, 3)))
    return Schedule(seed, index, rnd.random() < 0.5, steps)


def covering(seed: int, at_least: int) -> int:
    """How many schedules of `seed`, from the first, play every step at least once, contained
    and not: `at_least` or the few more it takes (a short run would miss a rare step)."""
    count, seen = 0, set[str | bool]()
    while count < at_least or seen != {*STEPS, True, False}:
        plan = schedule(seed, count)
        seen |= {step for step, _ in plan.steps} | {plan.contained}
        count += 1
    return count


@dataclass
class Report:
    schedules: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)  # two at once, or one after decommission
    stuck: list[str] = field(default_factory=list)  # a worker not running again after a step
    samples: int = 0
    bad_samples: int = 0  # samples that showed a violation
    steps: dict[str, int] = field(default_factory=dict)
    durations: dict[str, list[float]] = field(default_factory=dict)  # a step and its settling

    def line(self) -> str:
        kinds = ", ".join(f"{k} {self.steps.get(k, 0)}" for k in STEPS)
        return (
            f"{len(self.schedules)} schedules ({kinds}), {self.samples} samples, "
            f"{len(self.violations)} violations ({self.bad_samples} samples), "
            f"{len(self.stuck)} stuck"
        )


class Lane:
    """One host of the rig; `run(schedule)` plays a schedule on a fresh host."""

    def __init__(self, root: Path, cgroup: Path, name: str) -> None:
        self.name = name
        self.dir = root / name
        self.cgroup = cgroup / name
        self.controller = FakeController(lambda x: x.answer(410, REFUSAL), ())
        self.proc: subprocess.Popen[bytes] | None = None
        self.unit = 0  # which cgroup the agent runs in now
        self.contained = False
        self.zero_worker = False  # decommissioned: no worker copy may run
        self.lock = threading.Lock()
        self.current = ""  # the schedule being played, for a violation's report
        self.mounted: list[Path] = []
        self.killed: set[int] = set()  # copies the rig killed (until they are reaped)

    # --- the host -------------------------------------------------------------------
    @property
    def state_dir(self) -> Path:
        return self.dir / "state"

    def marker(self, name: str) -> str:
        return str(self.dir / f"{name}.py")

    def copies(self) -> dict[str, list[int]]:
        pids = set(nt.procs_below(self.cgroup))
        lines = {pid: nt.cmdline(pid) for pid in pids}
        return {c: [p for p, line in lines.items() if self.marker(c) in line] for c in COMPONENTS}

    def write_config(self, variant: int = 0) -> None:
        for name in COMPONENTS:
            Path(self.marker(name)).write_text(SLEEPER)
        py = sys.executable
        self.dir.joinpath("agent.yaml").write_text(
            f"version: 1\ncontroller: {{url: '{self.controller.url}', timeout: 2s, "
            "max_retry_delay: 1s}\ninstance: {id: i-1, host_name: node1}\nroles:\n"
            "  worker:\n    components:\n      worker:\n"
            f"        command: [{py}, {self.marker('worker')}]\n        stop_timeout: 3s\n"
            f"        environment: {{VARIANT: '{variant}'}}\n"
            "        decommission_exit_codes: [100]\n"
            "        restart: {policy: always, initial_delay: 0, delay: 0.1s, max_delay: 0.5s}\n"
            "  reverse-proxy:\n    components:\n      sidecar:\n"
            f"        command: [{py}, {self.marker('sidecar')}]\n        stop_timeout: 3s\n"
            "        restart: {policy: always, initial_delay: 0, delay: 0.1s, max_delay: 0.5s}\n"
            f"state_directory: '{self.state_dir}'\n"
        )

    def unit_cgroup(self) -> Path:
        return self.cgroup / f"unit-{self.unit}"

    def start_agent(self) -> None:
        where = self.unit_cgroup()
        where.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "XCE_AGENT_CGROUP"}
        if self.contained:
            env["XCE_AGENT_CGROUP"] = str(where)
        run = [sys.executable, "-m", "xce_agent", "run", "--config", str(self.dir / "agent.yaml")]
        wrapper = ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(where)]
        with open(self.dir / "agent.log", "ab") as log:
            self.proc = subprocess.Popen(
                [*wrapper, *run], stdout=log, stderr=subprocess.STDOUT, env=env
            )

    def agent_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def end_agent(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def wipe(self) -> None:
        """No host: everything of the lane killed, its cgroups and state gone."""
        with self.lock:
            self.zero_worker = False
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        nt.remove_tree(self.cgroup)
        if self.mounted:
            nt.unmount(self.state_dir, layers=3)  # a read-only bind left, and the tmpfs
        self.mounted.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def fresh(self, contained: bool) -> None:
        self.wipe()
        self.cgroup.mkdir(parents=True, exist_ok=True)
        self.dir.mkdir(parents=True)
        nt.mount_small(self.state_dir, "4m")
        self.mounted.append(self.state_dir)
        self.contained, self.unit = contained, 0
        self.killed.clear()  # pids wrap around: a new host's may be an old one's
        self.controller.set_phase("valid")
        self.write_config()
        self.start_agent()

    def worker_runs(self) -> bool:
        """One copy of each component, none of them one the rig killed."""
        found = self.copies()
        return all(len(pids) == 1 and pids[0] not in self.killed for pids in found.values())

    def supervised(self) -> bool:
        """The agent runs and says so, and each component's one copy is the one it records
        (the worker's none, once decommissioned)."""
        try:
            state = json.loads((self.state_dir / "state.json").read_text())
        except (OSError, ValueError):
            return False
        agent = state.get("agent") or {}
        if self.proc is None or agent.get("pid") != self.proc.pid:
            return False
        if state.get("lifecycle") != "running":
            return False
        found = self.copies()
        records = {c.get("name"): c for c in state.get("components", [])}
        for name in COMPONENTS:
            if name == "worker" and self.zero_worker:
                if found[name]:
                    return False
                continue
            record = records.get(name, {})
            if self.zero_worker and not found[name]:
                continue  # a decommissioned host's agent, restarted, starts no role again
            if record.get("phase") != "running" or found[name] != [record.get("pid")]:
                return False
            if found[name][0] in self.killed:
                return False
        return True

    def tombstone(self) -> bool:
        try:
            return bool(json.loads((self.state_dir / "state.json").read_text()).get("tombstone"))
        except (OSError, ValueError):
            return False

    # --- a schedule -----------------------------------------------------------------
    def run(self, plan: Schedule, report: Report) -> None:
        self.current = plan.describe()
        began = time.monotonic()
        self.fresh(plan.contained)
        if not self._settle(report, "the first start"):
            return
        with self.lock:
            report.durations.setdefault("fresh host", []).append(time.monotonic() - began)
        for kind, point in plan.steps:
            with self.lock:
                report.steps[kind] = report.steps.get(kind, 0) + 1
            began = time.monotonic()
            try:
                getattr(self, "step_" + kind.replace("-", "_"))(point)
            except AssertionError as exc:  # a step's own wait ran out
                with self.lock:
                    report.stuck.append(f"{self.current}: {kind} did not finish: {exc}")
                break
            if not self._settle(report, kind):
                break
            with self.lock:
                report.durations.setdefault(kind, []).append(time.monotonic() - began)
        with self.lock:
            broke = any(v.startswith(self.current + ":") for v in report.violations)
        if broke:  # the log of a counterexample is kept beside the run
            log = self.dir / "agent.log"
            shutil.copy(log, self.dir.parent / f"counterexample-{plan.seed}-{plan.index}.log")

    def _settle(self, report: Report, after: str) -> bool:
        if not self.agent_alive():
            self.start_agent()
        try:
            wait_for(self.supervised, SETTLE)
        except AssertionError:
            tail = "\n    ".join((self.dir / "agent.log").read_text().splitlines()[-12:])
            with self.lock:
                report.stuck.append(f"{self.current}: not settled after {after}\n    {tail}")
            return False
        return True

    # --- steps ----------------------------------------------------------------------
    def step_detach_elsewhere(self, point: float) -> None:
        self.end_agent(signal.SIGTERM)
        self.unit += 1
        self.start_agent()

    def step_kill9_agent(self, point: float) -> None:
        time.sleep(point * 0.5)  # a random point of its life, not a synchronisation
        self.end_agent(signal.SIGKILL)
        self.start_agent()

    def _kill_worker(self) -> None:
        for pid in self.copies()["worker"]:
            self.killed.add(pid)
            os.kill(pid, signal.SIGKILL)

    def step_kill9_worker(self, point: float) -> None:
        self._kill_worker()

    def step_kill9_worker_then_agent(self, point: float) -> None:
        self._kill_worker()
        time.sleep(point * 0.3)  # somewhere in the restart
        self.end_agent(signal.SIGKILL)
        self.start_agent()

    def _unwritable(self, point: float, full: bool) -> None:
        filler = None
        if full:
            filler = nt.fill(self.state_dir)
        else:
            nt.mount_read_only(self.state_dir)
        try:
            self._kill_worker()
            time.sleep(point * 0.6)
            if point < 0.5:
                self.end_agent(signal.SIGKILL)
                if point < 0.25:
                    self.start_agent()  # an agent that starts while nothing can be saved
                    time.sleep(0.5)
                    self.end_agent(signal.SIGKILL)
        finally:
            if filler is not None:
                filler.unlink()
            else:
                nt.unmount(self.state_dir)  # the bind mount; the tmpfs stays under it

    def step_unwritable_ro(self, point: float) -> None:
        self._unwritable(point, full=False)

    def step_unwritable_full(self, point: float) -> None:
        self._unwritable(point, full=True)

    def step_tree_removed(self, point: float) -> None:
        self.end_agent(signal.SIGTERM)
        unit, aside = self.unit_cgroup(), self.cgroup / "aside"
        aside.mkdir(exist_ok=True)
        for pid in nt.procs_below(unit):
            nt.enter(aside, pid)
        for leaf in sorted(unit.rglob("*"), key=lambda p: -len(p.parts)):
            if leaf.is_dir():
                leaf.rmdir()
        unit.rmdir()
        self.start_agent()

    def step_reload_storm(self, point: float) -> None:
        wait_for(lambda: (self.state_dir / "control.sock").exists() and self.agent_alive(), 20)
        for n in range(3 + int(point * 8)):
            if n % 3 == 2:
                self.write_config(variant=n)  # the worker's settings change: it restarts
            if self.proc is not None:
                self.proc.send_signal(signal.SIGHUP)
            time.sleep(0.02 * point)

    def step_reboot(self, point: float) -> None:
        """What a reboot leaves: no process of the host, records from another boot."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for cg in [self.cgroup, *[p for p in self.cgroup.rglob("*") if p.is_dir()]]:
            (cg / "cgroup.kill").write_text("1")
        wait_for(lambda: not nt.procs_below(self.cgroup), 10)
        path = self.state_dir / "state.json"
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            state = None
        if isinstance(state, dict):
            for record in state.get("components", []):
                if isinstance(record.get("identity"), dict):
                    record["identity"]["boot_id"] = "another-boot"
            for intent in state.get("starting", []):
                intent["boot_id"] = "another-boot"
            path.write_text(json.dumps(state))
        self.start_agent()

    def step_decommission(self, point: float) -> None:
        """The controller refuses the host: from when the agent saved its tombstone and
        stopped the worker, no copy of the worker may run again."""
        self.controller.set_phase("refuse")
        wait_for(lambda: self.tombstone() and not self.copies()["worker"], SETTLE)
        with self.lock:
            self.zero_worker = True

    def close(self) -> None:
        self.wipe()
        self.controller.close()


class Sampler:
    """Counts every lane's copies until stopped; what broke the promise, as lines."""

    def __init__(self, lanes: list[Lane], report: Report, every: float = 0.01) -> None:
        self.lanes, self.report, self.every = lanes, report, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._seen: set[str] = set()

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            for lane in self.lanes:
                found = lane.copies()
                with lane.lock:
                    zero = lane.zero_worker
                    self.report.samples += 1
                    for name, pids in found.items():
                        if len(pids) > 1 or (zero and name == "worker" and pids):
                            self._violation(lane, name, pids, zero and name == "worker")

    def _violation(self, lane: Lane, name: str, pids: list[int], after: bool) -> None:
        """One line per schedule, component and set of copies; every sample counted."""
        self.report.bad_samples += 1
        why = "after its decommission" if after else "at once"
        line = f"{lane.current}: {name} has {len(pids)} copies {why} {sorted(pids)}"
        if line not in self._seen:
            self._seen.add(line)
            self.report.violations.append(line)


def run_schedules(
    root: Path, cgroup: Path, seed: int, count: int, lanes: int = 4, first: int = 0
) -> Report:
    """Schedules first..first+count-1 of `seed`, on `lanes` hosts at once."""
    report = Report()
    hosts = [Lane(root, cgroup, f"lane{n}") for n in range(lanes)]
    sampler = Sampler(hosts, report).start()
    queue = list(range(first, first + count))
    guard = threading.Lock()

    def work(lane: Lane) -> None:
        while True:
            with guard:
                if not queue:
                    return
                index = queue.pop(0)
            plan = schedule(seed, index)
            with lane.lock:
                report.schedules.append(plan.describe())
            lane.run(plan, report)

    threads = [threading.Thread(target=work, args=(h,)) for h in hosts]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sampler.stop()
        for host in hosts:
            host.close()
    return report
