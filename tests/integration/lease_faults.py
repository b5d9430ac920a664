"""Random fault schedules against a LeaseCluster, and what the probes' records say after.

Each lane owns one lease and runs schedules back to back: a fault aimed (mostly) at that
lease's holder, held for a random time, lifted, then a wait until the lease is held and its
component runs again. Lanes run at once, so faults overlap; a per-target lock keeps two lanes
from stopping and killing the same agent at the same time.

Faults: a blackhole of the agent's traffic, kill -9 of the agent (restarted later, a new
run), kill -9 of the holder's component, SIGSTOP of the agent for longer than the TTL, and the
cluster's controller faults (`LeaseCluster.controller_faults`: kill -9 of the controller,
restarted later; on replicas, kill -9 of one replica and a database failover). Controller
faults are never back to back, and with `each_first` every kind of them comes early.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.lease_checker import Interval, intervals, percentile, running, violations
from tests.integration.lease_cluster import LeaseCluster
from tests.integration.singleton_probe import pid_of

KINDS = {
    "blackhole": 3,
    "kill-agent": 2,
    "kill-component": 2,
    "sigstop": 2,
}
LOSES_HOST = ("blackhole", "kill-agent", "sigstop")  # the holder's host is gone for a while
MEASURE_EVERY = 5  # every 5th host fault has the cluster to itself and its takeover timed


@dataclass
class Fault:
    kind: str
    target: str  # a host name, or "controller"
    lease: str
    start: float
    end: float = 0.0  # when it was lifted
    duration: float = 0.0
    measured: bool = False  # alone from its start to 2 x TTL later: its takeover is timed


@dataclass
class Report:
    kinds: list[str] = field(default_factory=list)
    schedules: int = 0
    faults: list[Fault] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    takeovers: list[float] = field(default_factory=list)  # seconds from loss to a new start
    slow: list[str] = field(default_factory=list)  # takeovers over 2 x TTL
    intervals: int = 0

    def line(self, ttl: float) -> str:
        p50 = percentile(self.takeovers, 0.5) / ttl
        p95 = percentile(self.takeovers, 0.95) / ttl
        kinds = ", ".join(f"{k} {sum(f.kind == k for f in self.faults)}" for k in self.kinds)
        return (
            f"{self.schedules} schedules ({kinds}), {self.intervals} intervals, "
            f"{len(self.violations)} violations, {len(self.takeovers)} takeovers measured: "
            f"p50 {p50:.2f} TTL, p95 {p95:.2f} TTL, over 2 TTL {len(self.slow)}"
        )


class Chaos:
    def __init__(
        self,
        cluster: LeaseCluster,
        seed: int,
        each_first: bool = False,
        measure_every: int = MEASURE_EVERY,
    ) -> None:
        self.c = cluster
        # A short run times more of its host faults, so it still has takeovers to bound.
        self.measure_every = measure_every
        self.rnd = random.Random(seed)  # noqa: S311 - a reproducible schedule
        self.kinds = {**KINDS, **cluster.controller_faults}
        self.owed = set(cluster.controller_faults) if each_first else set()  # not yet run
        self.locks = {a.name: threading.Lock() for a in cluster.agents}
        self.locks["controller"] = threading.Lock()
        self.faults: list[Fault] = []
        self._mutex = threading.Lock()
        self.count = 0
        self.controller_back = 0.0  # when the controller last came back
        self.down = threading.Semaphore(len(cluster.agents) - 1)
        self._exclusive = threading.Lock()
        self.host_faults = 0

    def run(self, schedules: int) -> Report:
        self.count = schedules
        threads = [
            threading.Thread(target=self._lane, args=(lease,), name=f"lane-{lease}")
            for lease in self.c.leases
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.heal()
        return analyse(self.c, self.faults, list(self.kinds))

    def _take(self) -> bool:
        with self._mutex:
            if self.count <= 0:
                return False
            self.count -= 1
            return True

    def _lane(self, lease: str) -> None:
        rnd = random.Random(self.rnd.random())  # noqa: S311 - one stream per lane
        while self._take():
            self._schedule(lease, rnd)
            self._recover(lease)
            time.sleep(rnd.uniform(0, 0.5))

    def _kind(self, rnd: random.Random) -> str:
        # Each controller restart keeps every lease for one TTL: back-to-back ones would
        # only measure that (see _target).
        while self.owed:  # each controller fault at least once: wait for its turn
            quiet = time.monotonic() - self.controller_back >= 4 * self.c.ttl
            if quiet and not self.locks["controller"].locked():
                with self._mutex:
                    if self.owed:
                        return rnd.choice(sorted(self.owed))
            time.sleep(0.1)
        return rnd.choices(list(self.kinds), weights=list(self.kinds.values()))[0]

    def _target(self, kind: str, lease: str, rnd: random.Random) -> tuple[str, threading.Lock]:
        """The holder of the lane's lease mostly, else any host; whose lock is free."""
        if kind in self.c.controller_faults:
            lock = self.locks["controller"]
            recent = time.monotonic() - self.controller_back < 4 * self.c.ttl
            if not recent and lock.acquire(blocking=False):
                return "controller", lock
            kind = "kill-component"  # the controller was just (or is being) restarted
        while True:
            target = "controller"
            if kind not in self.c.controller_faults:
                holder = self.c.holders().get(lease, "")
                names = [a.name for a in self.c.agents]
                target = holder if holder and rnd.random() < 0.85 else rnd.choice(names)
            lock = self.locks[target]
            if lock.acquire(blocking=False):
                return target, lock
            time.sleep(0.05)

    def _schedule(self, lease: str, rnd: random.Random) -> None:
        kind = self._kind(rnd)
        measured = False
        if kind in LOSES_HOST:
            with self._mutex:
                self.host_faults += 1
                measured = self.host_faults % self.measure_every == 0
        exclusive = measured or kind in self.c.controller_faults
        with self._slots(2 if exclusive else 1 if kind in LOSES_HOST else 0):
            if measured:
                time.sleep(0.5 * self.c.ttl)  # what the last faults left settles
            target, lock = self._target(kind, lease, rnd)
            if kind in self.c.controller_faults and target != "controller":
                kind = "kill-component"
            try:
                fault = Fault(kind, target, lease, time.monotonic(), measured=measured)
                self._inflict(fault, rnd)
                fault.end = time.monotonic()
                if measured:  # nothing else happens until a takeover was due
                    time.sleep(max(0.0, fault.start + 2.2 * self.c.ttl - time.monotonic()))
                with self._mutex:
                    self.faults.append(fault)
            finally:
                lock.release()

    @contextlib.contextmanager
    def _slots(self, count: int) -> Iterator[None]:
        """Host faults take one of hosts - 1 slots, so one host is always there to take
        over; a measured one or a controller restart takes them all, one at a time."""
        with self._exclusive if count > 1 else contextlib.nullcontext():
            for _ in range(count):
                self.down.acquire()
            try:
                yield
            finally:
                for _ in range(count):
                    self.down.release()

    def _inflict(self, fault: Fault, rnd: random.Random) -> None:
        ttl, kind, target = self.c.ttl, fault.kind, fault.target
        if kind == "blackhole":
            # A measured one is long enough that the holder must lose its lease.
            fault.duration = rnd.uniform(1.2 if fault.measured else 0.3, 1.6) * ttl
            self.c.agent(target).proxy.blackhole(True)
            time.sleep(fault.duration)
            self.c.agent(target).proxy.blackhole(False)
        elif kind == "sigstop":
            fault.duration = rnd.uniform(1.1, 1.5) * ttl
            self.c.agent(target).pause(True)
            time.sleep(fault.duration)
            self.c.agent(target).pause(False)
        elif kind == "kill-agent":
            fault.duration = rnd.uniform(0.2, 0.6) * ttl
            self.c.agent(target).kill()
            time.sleep(fault.duration)
            self.c.agent(target).start()
        elif kind == "kill-component":
            self._kill_component(fault.lease, target)
        else:
            fault.duration = self.c.controller_fault(kind, rnd)
            self.controller_back = time.monotonic()
            self.owed.discard(kind)

    def _kill_component(self, lease: str, host: str) -> None:
        """SIGKILL the host's running probe of `lease`: the newest record first, and only a
        process that is that probe (a record's pid may be another process's by now)."""
        for path in sorted(
            (self.c.records / lease).glob(f"{host}-*.rec"), key=_mtime, reverse=True
        ):
            pid = pid_of(path)
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    args = handle.read().split(b"\0")
                with open(f"/proc/{pid}/environ", "rb") as handle:
                    env = handle.read().split(b"\0")
                mine = any(b"singleton_probe" in a for a in args) and host.encode() in args
                if mine and f"XCE_LEASE_NAME={lease}".encode() in env:
                    os.kill(pid, signal.SIGKILL)
                    return
            except OSError:
                continue

    def _recover(self, lease: str, timeout: float = 30.0) -> None:
        """Until the lease's component runs again somewhere."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and not running(self.c.records, lease, time.monotonic()):
            time.sleep(0.1)

    def heal(self) -> None:
        for agent in self.c.agents:
            agent.proxy.blackhole(False)
            agent.pause(False)
            if not agent.alive():
                agent.start()
        self.c.heal_controller()


def analyse(c: LeaseCluster, faults: list[Fault], kinds: list[str]) -> Report:
    report = Report(kinds=kinds, schedules=len(faults), faults=faults)
    found = intervals(c.records)
    for spans in found.values():
        report.violations += violations(spans)
        report.intervals += len(spans)
    hosts = [a.name for a in c.agents]
    for fault in faults:
        if not fault.measured or not _clean(fault, faults, c.ttl, hosts, set(c.controller_faults)):
            continue
        for spans in found.values():  # every lease the host ran then is lost with it
            held = [s for s in spans if s.host == fault.target and s.start <= fault.start < s.end]
            if not held:
                continue
            after = [s for s in spans if s.start > held[0].start]
            took = after[0].start - fault.start if after else float("inf")
            report.takeovers.append(took)
            if took > 2 * c.ttl:
                report.slow.append(f"{fault}: next start {_first(after)}")
    return report


def _clean(
    fault: Fault, faults: list[Fault], ttl: float, hosts: list[str], controller: set[str]
) -> bool:
    """Whether nothing else could delay the takeover: the controller up, and another host
    well all along (a restarted agent counts as down until it has had a TTL to join)."""

    def overlaps(f: Fault, tail: float, since: float) -> bool:
        return f.start < fault.start + 2 * ttl and f.end + tail > since

    if any(f.kind in controller and overlaps(f, ttl, fault.start - ttl) for f in faults):
        return False
    troubled = {fault.target}
    for f in faults:
        tail = ttl if f.kind == "kill-agent" else 0.3
        if f.kind in LOSES_HOST and overlaps(f, tail, fault.start):
            troubled.add(f.target)
    return len(troubled) < len(hosts)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _first(spans: list[Interval]) -> str:
    return str(spans[0]) if spans else "none"
