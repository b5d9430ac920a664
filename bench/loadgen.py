"""An open-loop HTTP/1.1 load generator on raw asyncio streams: simulated hosts of the
controller, each with its own connections, requests sent on schedule.

Latency is measured from the time a request was due, not from when it was sent: a stalled
server delays the requests queued behind it, and those delays are counted (no coordinated
omission). The lateness of the generator itself is kept apart, so a reader can tell a slow
server from a slow client: its send lag, and the longest its own event loop was held up.
While a phase is measured the generator runs no cyclic collection: with 20,000 connections
and their tasks held, one full pass of its collector stops it for 130-490 ms, and such a
pause inside a phase would count as the controller's latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


class Conn:
    """One keep-alive HTTP/1.1 connection; requests on it go one after another."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, body: Any = None, bearer: str = ""
    ) -> tuple[int, Any]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        data = b"" if body is None else json.dumps(body).encode()
        auth = f"Authorization: Bearer {bearer}\r\n" if bearer else ""
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n{auth}"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        self.writer.write(head.encode() + data)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            if line[:15].lower() == "content-length:":
                length = int(line[15:])
        payload = await self.reader.readexactly(length) if length else b""
        return status, json.loads(payload) if payload else None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


@dataclass
class Samples:
    """Latencies from the due time, with the due time (for per-second windows)."""

    due: list[float] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    send_lag: list[float] = field(default_factory=list)  # the generator's own lateness
    errors: int = 0
    stall: float = 0.0  # the longest the generator's own loop was held up
    watch_peak: int = 0  # watch answers in the busiest second of the phase
    watch_rate: float = 0.0  # watch answers per second, over the phase
    server_cpu: float = 0.0  # the controller's CPU over the phase, in cores
    client_cpu: float = 0.0  # the generator's own


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection in the generator while it measures: what it holds is collected
    and frozen first (outside the measured time), and it makes little garbage meanwhile."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


async def watch_loop(samples: Samples, start: float, until: float, every: float = 0.01) -> None:
    """Keep the generator's worst loop delay from `start` on: how late a wakeup due every
    `every` s arrives."""
    await asyncio.sleep(max(0.0, start - time.perf_counter()))
    while time.perf_counter() < until:
        due = time.perf_counter() + every
        await asyncio.sleep(every)
        samples.stall = max(samples.stall, time.perf_counter() - due)


class Fleet:
    def __init__(self, host: str, port: int, join_token: str = "") -> None:
        self.host, self.port = host, port
        self.join_token = join_token
        self.credentials: dict[int, str] = {}  # host index -> the credential its join issued
        self.beats: dict[int, Conn] = {}
        self.watches: dict[int, Conn] = {}
        self.versions: dict[int, int] = {}
        self.watching = False
        self.watch_tasks: list[asyncio.Task[None]] = []
        self.in_phase = False  # every watch asks for 30 s from its first one
        self.answered: list[float] = []  # when each watch answer came

    def name(self, i: int) -> str:
        return f"load{i:05d}"

    async def join_all(self, first: int, last: int, concurrency: int = 32) -> list[float]:
        """Join hosts first..last-1, `concurrency` at a time; the finish time of each."""
        done: list[float] = []
        queue = iter(range(first, last))

        async def worker() -> None:
            for i in queue:
                conn = self.beats.setdefault(i, Conn(self.host, self.port))
                body = {"host": self.name(i), "instance_id": f"i-load-{i}"}
                status, answer = await conn.request("POST", "/v1/join", body, self.join_token)
                if status != 200:
                    raise SystemExit(f"bench: join {i} answered {status}: {answer}")
                self.versions[i] = int(answer["version"])
                self.credentials[i] = str(answer.get("credential", ""))
                done.append(time.perf_counter())

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done

    async def start_watches(
        self, hosts: range, per_second: float = 2000.0, in_phase: bool = False
    ) -> None:
        """Open a watch per host, ramped (agents do not all start in the same millisecond),
        then wait until the controller has caught up with them. `in_phase`: each asks for
        30 s from its first watch on, as agents that all reconnected in the same second after
        a controller restart (and asked for a fixed 30 s, as agents did before their jitter)."""
        self.watching = True
        self.in_phase = in_phase
        for n, i in enumerate(hosts):
            if i not in self.watches:
                self.watches[i] = Conn(self.host, self.port)
                self.watch_tasks.append(asyncio.ensure_future(self._watch(i)))
            if n % 100 == 99:
                await asyncio.sleep(100 / per_second)
        await self.settle()

    async def settle(self, quiet: float = 0.02, limit: float = 60.0) -> None:
        """Wait until a probe is answered within `quiet` seconds: the backlog is gone."""
        probe = Conn(self.host, self.port)
        deadline = time.perf_counter() + limit
        try:
            while time.perf_counter() < deadline:
                began = time.perf_counter()
                await probe.request("GET", "/v1/info")
                if time.perf_counter() - began < quiet:
                    return
                await asyncio.sleep(0.2)
        finally:
            probe.close()

    async def _watch(self, i: int) -> None:
        conn = self.watches[i]
        # Agents start at different times, so their 30 s long-polls end at different times.
        timeout = 30.0 if self.in_phase else random.uniform(1, 30)
        while self.watching:
            since = self.versions.get(i, 0)
            path = f"/v1/hosts/{self.name(i)}/watch?since={since}&timeout={timeout:.3f}"
            timeout = 30
            try:
                status, answer = await conn.request("GET", path, None, self.credentials[i])
            except (OSError, asyncio.IncompleteReadError):
                return
            if status == 200:
                self.versions[i] = int(answer["version"])
                self.answered.append(time.perf_counter())

    async def stop_watches(self) -> None:
        self.watching = False
        for conn in self.watches.values():
            conn.close()
        for task in self.watch_tasks:
            task.cancel()
        await asyncio.gather(*self.watch_tasks, return_exceptions=True)
        self.watches.clear()
        self.watch_tasks.clear()

    async def heartbeats(
        self,
        hosts: range,
        interval: float,
        seconds: float,
        seed: int,
        server_cpu: Callable[[], float] = lambda: 0.0,
    ) -> Samples:
        """Each host heartbeats every `interval` at a random phase, for `seconds`; the watch
        answers per second and the CPU of both sides (`server_cpu`: the controller's CPU
        seconds so far) over the same time."""
        rng = random.Random(seed)
        samples = Samples()
        body = {
            "agent_state": "running",
            "components": [{"name": "worker", "state": "running", "pid": 4242}],
        }

        async def host(i: int, phase: float, start: float) -> None:
            conn = self.beats.setdefault(i, Conn(self.host, self.port))
            due = start + phase
            while due < start + seconds:
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                sent = time.perf_counter()
                try:
                    status, _ = await conn.request(
                        "POST",
                        f"/v1/hosts/{self.name(i)}/heartbeat",
                        body,
                        self.credentials.get(i, ""),
                    )
                except (OSError, asyncio.IncompleteReadError):
                    status = 0
                    conn.close()
                end = time.perf_counter()
                if status != 200:
                    samples.errors += 1
                samples.due.append(due - start)
                samples.latency.append(end - due)
                samples.send_lag.append(sent - due)
                due += interval

        with collector_paused():
            start = time.perf_counter() + 0.5  # after the collector's pass, which is not timed
            monitor = asyncio.ensure_future(watch_loop(samples, start, start + seconds))
            self.answered.clear()
            cpu0, own0, wall0 = server_cpu(), time.process_time(), time.perf_counter()
            await asyncio.gather(*(host(i, rng.uniform(0, interval), start) for i in hosts))
            await monitor
            wall = time.perf_counter() - wall0
            samples.server_cpu = (server_cpu() - cpu0) / wall
            samples.client_cpu = (time.process_time() - own0) / wall
        per_second = Counter(int(t - start) for t in self.answered if start <= t < start + seconds)
        samples.watch_peak = max(per_second.values(), default=0)
        samples.watch_rate = sum(per_second.values()) / seconds
        return samples

    def close(self) -> None:
        for conn in self.beats.values():
            conn.close()
        self.beats.clear()


def worst_window(samples: Samples, width: float = 1.0) -> float:
    """The slowest request of the worst one-second window of due times."""
    windows: dict[int, float] = {}
    for due, latency in zip(samples.due, samples.latency):
        slot = int(due // width)
        windows[slot] = max(windows.get(slot, 0.0), latency)
    return max(windows.values(), default=float("nan"))


def window_p99(samples: Samples, width: float = 1.0) -> float:
    """The worst per-second p99: a stall shows even when the whole run's p99 hides it."""
    windows: dict[int, list[float]] = {}
    for due, latency in zip(samples.due, samples.latency):
        windows.setdefault(int(due // width), []).append(latency)
    worst = 0.0
    for values in windows.values():
        values.sort()
        worst = max(worst, values[min(len(values) - 1, round(0.99 * (len(values) - 1)))])
    return worst
