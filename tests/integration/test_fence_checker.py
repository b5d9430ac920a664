"""No write under a lost lease is stored: random schedules of provisioners that pause past
their grant, of replicas stopped (SIGSTOP: requests held, then run late) and killed, on two
controller replicas sharing PostgreSQL; the stored log checked by fence_checker.

Three hosts race for one lease ("prov") and, holding it, record expected instances under it
(`POST /v1/expected?lease=prov&token=T`), each write naming its token in its instance id. A
writer paused past its TTL (a provisioner's GC pause, a VM stolen for a while) writes once more
with the grant it had: another may hold the lease by then. A write sent to a stopped replica
is run when the replica resumes, after the lease may have moved on. The checker then finds
every stored write between its grant and the next grant or release, every acknowledged one
stored once and no refused one stored.

XCE_FENCE_SECONDS (20 in `make test`) and XCE_FENCE_SEED change the run.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from tests.integration import fence_checker
from tests.integration.fence_checker import Outcome, write_id
from tests.integration.replica_set import ADMIN_TOKEN, Replicas, join
from xce_controller.core.model import Fact
from xce_controller.store.open import open_store

SECONDS = float(os.environ.get("XCE_FENCE_SECONDS", "20"))
TTL = 1.5
LEASE = "prov"
ACTORS = ("a", "b", "c")


@dataclass
class Tally:
    outcomes: list[Outcome] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)
    pauses: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def said(self, write: str, said: str) -> None:
        with self.lock:
            self.outcomes.append(Outcome(write, said))
            self.answers[said] += 1


class Writer:
    """One provisioner host: takes the lease when it can, writes under it, renews it, and now
    and then pauses past its grant and writes once more with it."""

    def __init__(self, name: str, cred: str, urls: list[str], rng: random.Random, tally: Tally):
        self.name, self.cred, self.urls, self.rng, self.tally = name, cred, urls, rng, tally
        self.n = 0

    def run(self, until: float) -> None:
        while time.monotonic() < until:
            token = self._take()
            if not token:
                threading.Event().wait(self.rng.uniform(0.05, 0.3))
                continue
            while token and time.monotonic() < until:
                self._write(token)
                if self.rng.random() < 0.2:
                    with self.tally.lock:
                        self.tally.pauses += 1
                    threading.Event().wait(TTL * self.rng.uniform(1.1, 2.0))  # paused, unaware
                    self._write(token)  # with the grant it had: maybe lost meanwhile
                token = self._take()  # renewed, granted again or taken over

    def _url(self) -> str:
        return self.rng.choice(self.urls)

    def _take(self) -> int:
        body = {"host": self.name, "session": "s1", "ttl": TTL}
        try:
            r = _post(self._url(), f"/v1/leases/{LEASE}", body, self.cred)
        except requests.RequestException:
            return 0
        return int(r.json()["token"]) if r.status_code == 200 else 0

    def _write(self, token: int) -> None:
        self.n += 1
        write = write_id(token, self.name, self.n)
        body = {"instance_id": write, "template": "default"}
        try:
            r = _post(self._url(), "/v1/expected", body, ADMIN_TOKEN, lease=LEASE, token=token)
        except requests.RequestException:
            self.tally.said(write, "unknown")
            return
        if r.status_code == 201:
            self.tally.said(write, "stored")
        elif r.status_code == 409 and r.json().get("error") == "stale_lease":
            self.tally.said(write, "stale")
        elif r.status_code >= 500:
            self.tally.said(write, "unknown")
        else:
            self.tally.said(write, f"unexpected {r.status_code} {r.text[:200]}")


def _post(url: str, path: str, body: object, bearer: str, **params: str | int) -> requests.Response:
    # Short: a stopped replica holds the request, and the writer goes on (its outcome unknown).
    headers = {"Authorization": f"Bearer {bearer}"}
    return requests.post(url + path, json=body, params=params, headers=headers, timeout=2)


def faults(replicas: Replicas, rng: random.Random, until: float, done: list[str]) -> None:
    """One fault at a time on a random replica: stopped for a while, or killed and restarted;
    each kind once first, so a run always meets both."""
    first = ["stop", "kill"]
    while time.monotonic() < until:
        threading.Event().wait(rng.uniform(0.5, 2.0))
        victim = replicas[rng.randrange(2)]
        assert victim.proc is not None
        kind = first.pop(0) if first else rng.choice(["stop", "stop", "kill"])
        if kind == "stop":
            os.killpg(victim.proc.pid, signal.SIGSTOP)
            threading.Event().wait(rng.uniform(0.5, 2.5))
            os.killpg(victim.proc.pid, signal.SIGCONT)
        else:
            victim.kill()
            victim.start()
        done.append(kind)


@pytest.fixture
def two(tmp_path: Path, pg_dsn: str) -> Iterator[Replicas]:
    replicas = Replicas(tmp_path, pg_dsn, 2).start()
    try:
        yield replicas
    finally:
        for proc in replicas.procs:  # a replica left stopped would not hear its SIGTERM
            if proc.proc is not None and proc.proc.poll() is None:
                os.killpg(proc.proc.pid, signal.SIGCONT)
        replicas.stop()


def test_no_write_under_a_lost_grant_is_stored_whatever_the_faults(
    two: Replicas, pg_dsn: str
) -> None:
    seed = int(os.environ.get("XCE_FENCE_SEED", str(random.SystemRandom().randrange(10**6))))
    rng = random.Random(seed)  # noqa: S311 (a schedule, no secret)
    tally = Tally()
    creds = {name: join(two.urls[0], name) for name in ACTORS}
    until = time.monotonic() + SECONDS
    writers = [Writer(n, creds[n], two.urls, _child(rng), tally) for n in ACTORS]
    threads = [threading.Thread(target=w.run, args=(until,)) for w in writers]
    injected: list[str] = []
    chaos = threading.Thread(target=faults, args=(two, _child(rng), until, injected))
    for t in [*threads, chaos]:
        t.start()
    for t in [*threads, chaos]:
        t.join(SECONDS + 60)
        assert not t.is_alive()
    store = open_store(pg_dsn)
    try:
        log = store.facts()
    finally:
        store.close()
    grants = [f for f in log if f.kind == fence_checker.GRANTED and f.data["lease"] == LEASE]
    found = fence_checker.problems(log, LEASE, tally.outcomes)
    summary = (
        f"seed {seed}: {len(tally.outcomes)} writes {dict(tally.answers)}, {len(grants)} grants, "
        f"{tally.pauses} writer pauses, faults {dict(Counter(injected))}"
    )
    print(summary)
    assert found == [], summary + "\n" + "\n".join(found[:20])
    unexpected = [o for o in tally.outcomes if o.said.startswith("unexpected")]
    assert unexpected == [], unexpected[:5]
    # The schedule met what it is about: stale writes sent and refused, takeovers, faults.
    assert tally.answers["stale"] > 0 and tally.answers["stored"] > 0, summary
    assert len({g.data["host"] for g in grants}) >= 2, summary
    assert {"stop", "kill"} <= set(injected), summary


def _child(rng: random.Random) -> random.Random:
    return random.Random(rng.random())  # noqa: S311 (a schedule, no secret)


def _fact(kind: str, **data: object) -> Fact:
    return Fact(kind, 0.0, "t", dict(data))


def _grant(token: int) -> Fact:
    return _fact("lease_granted", lease=LEASE, token=token, host="a")


def test_the_checker_finds_a_write_stored_after_its_grant_was_taken_over() -> None:
    log = [_grant(1), _fact("expected", instance_id=write_id(1, "a", 1)), _grant(2)]
    log.append(_fact("expected", instance_id=write_id(1, "a", 2)))  # the old holder's, late
    log.append(_fact("lease_released", lease=LEASE, token=2))
    log.append(_fact("expected", instance_id=write_id(2, "b", 1)))  # after its release
    said = [Outcome(write_id(1, "a", 1), "stored"), Outcome(write_id(1, "a", 2), "unknown")]
    said += [Outcome(write_id(2, "b", 1), "stale"), Outcome(write_id(2, "b", 2), "stored")]
    assert fence_checker.problems(log, LEASE, said) == [
        "fact 4: f1-a-2 stored under token 1 while the current grant is 2",
        "fact 6: f2-b-1 stored under token 2 while the current grant is none",
        "f2-b-1: refused as stale, stored 1 times",
        "f2-b-2: acknowledged, stored 0 times",
    ]
    fine = [_grant(1), _fact("expected", instance_id=write_id(1, "a", 1)), _grant(2)]
    assert fence_checker.problems(fine, LEASE, said[:1]) == []
