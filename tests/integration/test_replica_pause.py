"""A replica stopped (SIGSTOP) in the middle of its decisions while another decides the same
ones: when it runs again, every change it had decided on the old log is refused by the
store's check of the head it was decided on (the fence), counted, and decided again on the
new state, so no decision is made twice. Random stop points and lengths; the seed is printed.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import requests

from tests.integration.helpers import wait_for
from tests.integration.replica_set import CONFIG, JOIN_TOKEN, Replicas, call, stored_drains

# No timer of its own in the way: hosts are not lost while the test runs.
QUIET = CONFIG.replace("host_loss_grace: 4s", "host_loss_grace: 10m")
HOSTS = 300
STOPS = int(os.environ.get("XCE_PAUSE_STOPS", "40"))
WANTED = 3  # late writes refused before the test ends early


def stale(url: str) -> float:
    text = call(url, "GET", "/metrics").text
    line = next(ln for ln in text.splitlines() if ln.startswith("xce_controller_replica_stale_"))
    return float(line.split()[-1])


def test_a_stopped_replica_s_late_writes_are_refused_and_none_doubled(
    tmp_path: Path, pg_dsn: str
) -> None:
    seed = int(os.environ.get("XCE_PAUSE_SEED", str(random.SystemRandom().randrange(10**6))))
    rnd = random.Random(seed)  # noqa: S311 - a reproducible schedule
    replicas = Replicas(tmp_path, pg_dsn, 2, QUIET).start()
    try:
        a, b = replicas.urls
        names = [f"h{n}" for n in range(HOSTS)]
        for name in names:
            assert call(b, "POST", "/v1/join", {"host": name}, JOIN_TOKEN).status_code == 200
        answers: list[tuple[str, str, int]] = []  # (replica, host, status)
        done = threading.Event()

        def decide_on_a() -> None:
            for name in names:
                try:
                    r = call(a, "POST", f"/v1/hosts/{name}/decommission", {})
                except requests.RequestException:
                    continue
                answers.append(("a", name, r.status_code))
            done.set()

        def decide_on_b(targets: list[str]) -> None:
            for name in targets:
                r = call(b, "POST", f"/v1/hosts/{name}/decommission", {})
                answers.append(("b", name, r.status_code))

        writer = threading.Thread(target=decide_on_a)
        writer.start()
        late, stalled, stops = 0.0, 0, 0
        pid = replicas[0].proc.pid  # type: ignore[union-attr]
        while stops < STOPS and late < WANTED and not done.is_set():
            before = stale(a)
            time.sleep(rnd.uniform(0.0, 0.05))
            os.kill(pid, signal.SIGSTOP)
            stops += 1
            on_a = sum(r == "a" for r, _, _ in answers)  # a's next host is names[on_a]
            taken = {h for r, h, _ in answers if r == "b"}
            ahead = [n for n in names[on_a:] if n not in taken][:2]
            other = threading.Thread(target=decide_on_b, args=(ahead,))
            other.start()
            other.join(rnd.uniform(0.3, 1.0))  # stopped past what b needs to decide both
            stalled += other.is_alive()  # a stopped a held the append lock: b waits for it
            os.kill(pid, signal.SIGCONT)
            other.join(30)
            wait_for(lambda n=on_a: sum(r == "a" for r, _, _ in answers) > n or done.is_set(), 30)  # type: ignore[misc]
            late += stale(a) - before
        writer.join(120)
        print(f"seed {seed}: {stops} stops, {late:.0f} late writes refused, {stalled} stalls")
        won = Counter(h for _, h, status in answers if status == 200)
        assert set(won.values()) == {1}, [h for h, n in won.items() if n > 1]
        assert {s for _, _, s in answers} <= {200, 409}, answers
        decided = stored_drains(pg_dsn)
        assert set(decided.values()) == {1} and len(decided) == len(won)
        assert late >= 1, f"seed {seed}: no stop landed between a decision and its commit"
    finally:
        replicas.stop()
