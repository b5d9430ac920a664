"""`make ha-soak`: controller replicas on a Patroni cluster while its leader machine dies.

Two `xce-controller serve` replicas share a PostgreSQL database that Patroni (with etcd)
keeps, reached by a libpq multi-host string with `target_session_attrs=read-write`. A fleet
of simulated hosts heartbeats through both replicas every second, and an admin writes a
decision (`POST /v1/expected`) as fast as the controller acknowledges them. Each round kills
the Patroni leader's Patroni and postmaster with SIGKILL, waits for the new leader, and
brings the dead node back as a replica. Then the store is checked against what was
acknowledged:

- write unavailability: from the kill to the next acknowledged decision;
- every acknowledged decision present exactly once (none lost, none duplicated);
- no host declared lost and no decommission issued (the failover contract, docs/ha.md);
- heartbeat latency before and after the failover.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from bench import Skipped
from bench.patroni import PatroniCluster, why_not
from bench.stats import percentile, table
from tests.integration.replica_set import ADMIN_TOKEN, CONFIG, JOIN_TOKEN, Replicas, call
from xce_controller.store.open import open_store


@dataclass
class Fleet:
    """The simulated hosts and the admin's decisions, with what was acknowledged when."""

    urls: list[str]
    hosts: int
    stop: threading.Event = field(default_factory=threading.Event)
    # (monotonic when the request was sent, instance id), for each acknowledged decision
    acked: list[tuple[float, str]] = field(default_factory=list)
    beats: list[tuple[float, float]] = field(default_factory=list)  # (monotonic, seconds)
    failed_beats: int = 0
    creds: dict[str, str] = field(default_factory=dict)
    last_ack: float = 0.0

    def join(self) -> None:
        for n in range(self.hosts):
            name = f"h{n:04d}"
            self.creds[name] = self._join(name, self.urls[n % len(self.urls)])

    def _join(self, name: str, url: str) -> str:
        """The host's credential; a 503 (a replica still catching up with the store after
        its start) is asked again, for up to a minute."""
        deadline = time.monotonic() + 60
        while True:
            got = call(url, "POST", "/v1/join", {"host": name}, JOIN_TOKEN)
            if got.status_code != 503 or time.monotonic() > deadline:
                got.raise_for_status()
                return str(got.json()["credential"])
            time.sleep(0.2)

    def beat(self, names: list[str]) -> None:
        session = requests.Session()
        n = 0
        while not self.stop.is_set():
            began = time.monotonic()
            for name in names:
                n += 1
                url = self.urls[n % len(self.urls)]
                t0 = time.monotonic()
                try:
                    got = session.post(
                        f"{url}/v1/hosts/{name}/heartbeat",
                        json={},
                        headers={"Authorization": f"Bearer {self.creds[name]}"},
                        timeout=5,
                    )
                    ok = got.status_code == 200
                except requests.RequestException:
                    ok = False
                if ok:
                    self.beats.append((t0, time.monotonic() - t0))
                else:
                    self.failed_beats += 1
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - began)))

    def decide(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            iid = f"i-{n}"
            body = {"instance_id": iid, "template": "default"}
            sent = time.monotonic()
            try:
                got = call(self.urls[n % len(self.urls)], "POST", "/v1/expected", body, ADMIN_TOKEN)
            except requests.RequestException:
                self.stop.wait(0.05)
                continue
            if got.status_code == 201:
                self.acked.append((sent, iid))
                self.last_ack = time.monotonic()
            else:
                self.stop.wait(0.05)

    def threads(self) -> list[threading.Thread]:
        names = sorted(self.creds)
        beaters = max(1, len(names) // 10)  # ten hosts a thread: each beats once a second
        parts = [names[i::beaters] for i in range(beaters)]
        found = [threading.Thread(target=self.beat, args=(p,), daemon=True) for p in parts]
        found.append(threading.Thread(target=self.decide, daemon=True))
        return found

    def acked_since(self, moment: float) -> int:
        """Decisions acknowledged whose request was sent after `moment` (one in flight at a
        kill may still be acknowledged: it committed before)."""
        return sum(1 for sent, _ in self.acked if sent > moment)


# The tests' replica settings, with a loss grace a loaded 2-core machine's load generator
# keeps in steady state (heartbeats every second, a host lost after 10 s of silence): a host
# declared lost then comes of the failover, not of the bench.
SETTINGS = CONFIG.replace("host_loss_grace: 4s", "host_loss_grace: 10s")
assert SETTINGS != CONFIG


@dataclass(frozen=True)
class Round:
    unavailable: float  # seconds from the kill to the first acknowledged decision sent after it
    p99_before: float
    p99_after: float  # in the 60 s after writes resumed


def p99_between(beats: list[tuple[float, float]], start: float, end: float) -> float:
    window = [s for at, s in beats if start <= at < end]
    return percentile(window, 99) if window else float("nan")


def failover(cluster: PatroniCluster, fleet: Fleet, settle: float) -> Round:
    time.sleep(settle)  # steady state before the kill (a bench's pacing, not a synchronisation)
    dead = cluster.leader()
    dead.kill()
    # Taken once the node is dead: a decision sent while its leader was being looked up was
    # acknowledged by the live leader, and counted as writes resumed (0.0 s in a run at
    # 90 decisions a second).
    killed = time.monotonic()
    cluster.wait(lambda: fleet.acked_since(killed) > 0, 120, "acknowledged writes again")
    resumed = fleet.last_ack
    time.sleep(settle)
    dead.wipe()
    dead.start()
    cluster.wait(cluster.synced, 180, "the dead node back as a synchronous replica")
    return Round(
        resumed - killed,
        p99_between(fleet.beats, killed - settle, killed),
        p99_between(fleet.beats, resumed, resumed + 60),
    )


def check(dsn: str, acked: list[tuple[float, str]]) -> dict[str, int]:
    store = open_store(dsn)
    try:
        facts = list(store.facts())
    finally:
        store.close()
    got = [f.data["instance_id"] for f in facts if f.kind == "expected"]
    wanted = {iid for _, iid in acked}
    states = [f.data.get("state") for f in facts if f.kind == "state"]
    return {
        "acknowledged": len(wanted),
        "lost": len(wanted - set(got)),
        "duplicated": len(got) - len(set(got)),
        "hosts_lost": sum(1 for s in states if s == "lost"),
        "decommissions": sum(1 for s in states if s in ("draining", "decommissioned")),
    }


def run(rounds: int = 3, hosts: int = 200, settle: float = 15.0) -> str:
    reason = why_not()
    if reason:
        raise Skipped(reason)
    root = Path(tempfile.mkdtemp(prefix="xce-ha-soak-"))
    root.chmod(0o711)  # the postgres user reaches its own directory below
    try:
        return _soak(root, rounds, hosts, settle)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _soak(root: Path, rounds: int, hosts: int, settle: float) -> str:
    cluster = PatroniCluster(root / "pg").start()
    try:
        cluster.sql("CREATE DATABASE xce")
        open_store(cluster.dsn()).close()  # the schema
        work = root / "replicas"
        work.mkdir()
        replicas = Replicas(work, cluster.dsn(), 2, SETTINGS).start()
        try:
            fleet = Fleet(replicas.urls, hosts)
            fleet.join()
            threads = fleet.threads()
            for t in threads:
                t.start()
            done = [failover(cluster, fleet, settle) for _ in range(rounds)]
            fleet.stop.set()
            for t in threads:
                t.join(30)
        finally:
            replicas.stop()
        outcome = check(cluster.dsn(), fleet.acked)
    finally:
        cluster.close()
    return report(done, outcome, hosts, fleet.failed_beats)


def report(done: list[Round], outcome: dict[str, int], hosts: int, failed: int) -> str:
    rows = [
        [
            str(n),
            f"{r.unavailable:.1f} s",
            f"{r.p99_before * 1000:.1f} ms",
            f"{r.p99_after * 1000:.1f} ms",
        ]
        for n, r in enumerate(done, 1)
    ]
    worst = max((r.unavailable for r in done), default=float("nan"))
    summary = (
        f"{len(done)} leader kills under {hosts} hosts heartbeating every 1 s (lost after 10 s) "
        "through 2 replicas: "
        f"worst write unavailability {worst:.1f} s (target under 30 s); "
        f"{outcome['acknowledged']} decisions acknowledged, {outcome['lost']} lost, "
        f"{outcome['duplicated']} duplicated; {outcome['hosts_lost']} hosts declared lost, "
        f"{outcome['decommissions']} decommissions issued; {failed} heartbeats refused or failed "
        "during the outages"
    )
    head = ["round", "write unavailability", "heartbeat p99 before", "p99 in the 60 s after"]
    return (
        table("Patroni leader kill -9 (ttl 20, loop_wait 2, synchronous)", head, rows)
        + "\n"
        + summary
    )
