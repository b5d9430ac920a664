"""A controller and agents whose singleton components are probes, each agent behind its own
TCP proxy that can blackhole its traffic: the rig of the lease tests and the bench."""

from __future__ import annotations

import contextlib
import json
import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import requests

from tests.integration.controller_proc import ControllerProcess
from tests.integration.helpers import wait_for
from tests.integration.singleton_probe import pid_of

PROBE = Path(__file__).with_name("singleton_probe.py")
JOIN = "lease-join-token-0123"
ADMIN = "lease-admin-token-0123"
CLUSTER = f"""\
version: 1
heartbeat_interval: 0.5s
host_loss_grace: 60s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
auth: {{admin_token: {ADMIN}, join_token: {JOIN}}}
templates:
  default: {{slots: 1}}
"""


class Proxy:
    """Forwards one agent's connections to the controller; `blackhole` makes them vanish:
    bytes are taken and dropped both ways, so the agent sees only timeouts. Given several
    controller ports (replicas), each connection goes to the next that accepts, as through a
    load balancer."""

    def __init__(self, upstream_port: int, *others: int) -> None:
        self.upstream_ports = [upstream_port, *others]
        self._next = 0
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.blackholed = False
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._dark: set[socket.socket] = set()  # connections that saw a blackhole
        self._lock = threading.Lock()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.listener, selectors.EVENT_READ)
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="proxy", daemon=True)
        self._thread.start()

    def blackhole(self, on: bool) -> None:
        with self._lock:
            self.blackholed = on
            if on:
                self._dark |= set(self._pairs)
            else:  # what was cut stays cut: those connections are reset
                for sock in list(self._dark):
                    self._close(sock)
                self._dark.clear()

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=5)
        for sock in list(self._pairs):
            self._close(sock)
        self.listener.close()

    def _run(self) -> None:
        while not self._stop:
            for key, _ in self._sel.select(timeout=0.1):
                with self._lock:
                    if key.fileobj is self.listener:
                        self._accept()
                    else:
                        self._pump(key.fileobj)  # type: ignore[arg-type]

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError):
            client, _ = self.listener.accept()
            if self.blackholed:
                self._pairs[client] = client  # read and dropped until the blackhole ends
                self._dark.add(client)
                self._sel.register(client, selectors.EVENT_READ)
                return
            upstream = self._connect()
            if upstream is None:
                client.close()  # the controller is down: refused, as it would be
                return
            self._pairs[client], self._pairs[upstream] = upstream, client
            for sock in (client, upstream):
                self._sel.register(sock, selectors.EVENT_READ)

    def _connect(self) -> socket.socket | None:
        ports = self.upstream_ports
        for n in range(len(ports)):
            port = ports[(self._next + n) % len(ports)]
            try:
                upstream = socket.create_connection(("127.0.0.1", port), 1)
            except OSError:
                continue
            self._next = (self._next + n + 1) % len(ports)
            return upstream
        return None

    def _pump(self, sock: socket.socket) -> None:
        if sock not in self._pairs:
            return
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._close(sock)
            return
        if self.blackholed or sock in self._dark:
            return
        try:
            self._pairs[sock].sendall(data)
        except OSError:
            self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        peer = self._pairs.pop(sock, None)
        for s in (sock, peer):
            if s is None:
                continue
            self._pairs.pop(s, None)
            self._dark.discard(s)
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(s)
            s.close()


class LeaseAgent:
    def __init__(
        self,
        root: Path,
        name: str,
        proxy: Proxy,
        leases: list[str],
        ttl: float,
        records: Path,
        give_up: int = 10000,
    ) -> None:
        self.name = name
        self.proxy = proxy
        self.dir = root / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = self.dir / "agent.yaml"
        lines = [
            "version: 1",
            f"controller: {{url: 'http://127.0.0.1:{proxy.port}', timeout: 2s, "
            f"max_retry_delay: 1s, token: {JOIN}}}",
            f"instance: {{id: i-{name}, host_name: {name}}}",
            "roles:",
            "  provisioner:",
            "    components:",
        ]
        stop = max(0.05, round(ttl / 2 - max(0.1 * ttl, 0.25) - 0.2, 2))
        for lease in leases:
            command = json.dumps([sys.executable, str(PROBE), str(records), name])
            lines += [
                f"      {lease}:",
                f"        command: {command}",
                f"        singleton: {{lease: {lease}, ttl: {ttl}s}}",
                f"        stop_timeout: {stop}s",
                "        restart: {initial_delay: 0, delay: 0.1s, max_delay: 0.3s, "
                f"give_up: {{starts: {give_up}, window: 1m}}}}",
            ]
        lines.append(f"state_directory: '{self.dir / 'state'}'")
        self.metrics_file = self.dir / "xce-agent.prom"
        lines.append(f"metrics: {{textfile: '{self.metrics_file}'}}")
        self.config.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = False

    def start(self) -> LeaseAgent:
        with open(self.dir / "agent.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "xce_agent", "run", "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.stopped = False
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            if self.stopped:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()

    def pause(self, on: bool) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP if on else signal.SIGCONT)
            self.stopped = on

    def graceful_stop(self, timeout: float = 30) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGUSR2)
            self.proc.wait(timeout=timeout)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`xce-agent ARGS --config` against this agent (operator commands)."""
        return subprocess.run(
            [sys.executable, "-m", "xce_agent", *args, "--config", str(self.config)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def state(self) -> dict[str, Any]:
        try:
            data = json.loads((self.dir / "state" / "state.json").read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def log(self) -> str:
        try:
            return (self.dir / "agent.log").read_text()
        except OSError:
            return ""

    def metrics(self) -> str:
        """The agent's metrics textfile ("" before the first write)."""
        try:
            return self.metrics_file.read_text()
        except OSError:
            return ""


class LeaseCluster:
    def __init__(
        self, root: Path, hosts: int = 3, leases: int = 1, ttl: float = 2.0, give_up: int = 10000
    ) -> None:
        self.root = root
        self.ttl = ttl
        self.records = root / "records"
        self.records.mkdir()
        self.leases = [f"lease-{i}" for i in range(leases)]
        ports = self._start_controllers()
        self.proxies = [Proxy(*ports) for _ in range(hosts)]
        self.agents = [
            LeaseAgent(root, f"h{i}", self.proxies[i], self.leases, ttl, self.records, give_up)
            for i in range(hosts)
        ]

    def start(self) -> LeaseCluster:
        for agent in self.agents:
            agent.start()
        return self

    def _start_controllers(self) -> list[int]:
        """The controller(s) the agents' proxies forward to: their ports."""
        self.ctl = ControllerProcess(self.root, CLUSTER).start()
        return [self.ctl.port]

    def _stop_controllers(self) -> None:
        self.ctl.stop()

    # The controller's faults the chaos may choose (lease_faults.py), with their weights.
    controller_faults: ClassVar[dict[str, int]] = {"kill-controller": 1}

    def controller_fault(self, kind: str, rnd: random.Random) -> float:
        """Inflict one controller fault and lift it; how long it lasted."""
        assert kind == "kill-controller"
        duration = rnd.uniform(0.1, 1.0) * self.ttl
        self.ctl.kill()
        time.sleep(duration)
        self.ctl.start()
        return duration

    def heal_controller(self) -> None:
        if self.ctl.proc is None or self.ctl.proc.poll() is not None:
            self.ctl.start()

    def admin(self, method: str, path: str) -> Any:
        headers = {"Authorization": f"Bearer {ADMIN}"}
        return requests.request(method, self.ctl.url + path, headers=headers, timeout=10).json()

    def scrape(self) -> str:
        """The controller's /metrics."""
        headers = {"Authorization": f"Bearer {ADMIN}"}
        r = requests.get(self.ctl.url + "/metrics", headers=headers, timeout=10)
        r.raise_for_status()
        return r.text

    def holders(self) -> dict[str, str]:
        """Lease -> the host holding it, from the controller; {} when it cannot say."""
        try:
            listing = self.admin("GET", "/v1/leases")
        except (requests.RequestException, ValueError):
            return {}
        return {le["lease"]: le["host"] for le in listing if le["state"] == "held"}

    def wait_all_held(self, timeout: float = 60) -> dict[str, str]:
        wait_for(lambda: len(self.holders()) == len(self.leases), timeout, step=0.1)
        return self.holders()

    def agent(self, name: str) -> LeaseAgent:
        return next(a for a in self.agents if a.name == name)

    def close(self) -> None:
        for agent in self.agents:
            if agent.alive():
                agent.pause(False)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    agent.graceful_stop(timeout=20)
                agent.kill()
        for proxy in self.proxies:
            proxy.close()
        self._stop_controllers()
        # Anything a killed agent left (a fence past its deadline is gone by itself).
        for path in self.records.glob("*/*.rec"):
            pid = pid_of(path)
            with contextlib.suppress(OSError):
                if PROBE.name in Path(f"/proc/{pid}/cmdline").read_text():
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
