"""Run the controller's API with uvicorn: as a process (`xce-controller serve`) or embedded."""

from __future__ import annotations

import asyncio
import inspect
import logging
import resource
import secrets
import socket
import threading
from pathlib import Path
from typing import Any

import uvicorn

from xce_controller.core.config import ClusterConfig
from xce_controller.http import read_deadline
from xce_controller.http.api import create_app
from xce_controller.http.replicas import CatchUp
from xce_controller.http.tls import TlsFiles, uvicorn_options
from xce_controller.service import Controller
from xce_controller.store.open import open_store
from xce_protocol.atomic_file import write_atomic
from xce_protocol.errors import ConfigError

log = logging.getLogger(__name__)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP lets asyncio set TCP_NODELAY on accepted connections; without it a
    # long-poll answer on a kept-alive connection waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


OPEN_FILES_WANTED = 1 << 20  # more than any cluster's connections; kernels cap it lower


def raise_open_files() -> int:
    """Let the process hold as many connections as its hard limit allows; the limit now.

    systemd starts a service with a soft limit of 1024 open files: about a thousand agents'
    watches, or as many silent connections held for the read deadline, and no agent could
    connect any more.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_WANTED)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError) as exc:  # above the kernel's nr_open: keep what it gave
            log.warning("cannot raise the open files limit from %d to %d: %s", soft, want, exc)
            return soft
        return want
    return soft


def token_file(db: Path, kind: str = "admin") -> Path:
    """Where `serve` puts a token it made for the run (admin, join): beside the database,
    mode 0600."""
    return Path(f"{db}.{kind}-token")


def stable_token(db: Path, kind: str = "admin") -> str:
    """The generated token of this database (admin, join): made once, then read on every
    start, so xcecli, scripts and agents keep working across restarts. A file others can
    read is refused."""
    path = token_file(db, kind)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        token = secrets.token_urlsafe(24)
        write_atomic(path, token + "\n", mode=0o600)
        return token
    if mode & 0o077:
        raise ConfigError(
            [
                f"{path}: expected a {kind} token file only its owner can read, "
                f"got mode {mode & 0o777:o}"
            ]
        )
    token = path.read_text(encoding="utf-8").strip()
    if not token:
        raise ConfigError([f"{path}: expected a {kind} token, got an empty file"])
    return token


def stable_admin_token(db: Path) -> str:
    return stable_token(db, "admin")


class _Server(uvicorn.Server):
    """uvicorn's server that ends the controller's long-polls as soon as it is told to stop."""

    def __init__(self, config: uvicorn.Config, controller: Controller) -> None:
        super().__init__(config)
        self.controller = controller

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        self.controller.release_watchers()


def make_server(
    cfg: ClusterConfig, db: Path | str, sock: socket.socket, tls: TlsFiles | None = None
) -> tuple[uvicorn.Server, Controller]:
    store = open_store(str(db))
    try:
        controller = Controller(cfg, store)
    except BaseException:
        store.close()
        raise
    app = create_app(controller)
    if controller.replica is not None:
        app.add_middleware(CatchUp, controller=controller)
    options: dict[str, Any] = {
        "log_level": "warning",
        "log_config": None,  # uvicorn's records go through the root handler (timestamps)
        "access_log": False,
        "lifespan": "on",
        "timeout_keep_alive": 120,
        "backlog": 1024,
        # A request must arrive within limits.request_read_timeout (read_deadline.py).
        # Read when a connection opens, so a reloaded config applies to the new ones.
        "http": read_deadline.protocol(lambda: controller.cfg.request_read_timeout),
        **uvicorn_options(tls),  # checked by tls.check before
    }
    # Long-polls would hold a graceful shutdown for their whole timeout. Debian 12's uvicorn
    # 0.17 has no such bound: there a stop waits for the open long-polls (30 s at most).
    if "timeout_graceful_shutdown" in inspect.signature(uvicorn.Config).parameters:
        options["timeout_graceful_shutdown"] = 2
    config = uvicorn.Config(app, **options)
    return _Server(config, controller), controller


class EmbeddedController:
    """The controller on a free loopback port in a thread (demo, tests, benchmarks)."""

    def __init__(self, cfg: ClusterConfig, db: Path | str, host: str = "127.0.0.1") -> None:
        self.sock = bind(host, 0)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self.server, self.controller = make_server(cfg, db, self.sock)
        self.admin_token = self.controller.cfg.admin_token
        self.admin_headers = {"Authorization": f"Bearer {self.admin_token}"}
        self.join_token = self.controller.cfg.join_token
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)

    def _run(self) -> None:
        asyncio.run(self.server.serve(sockets=[self.sock]))

    def start(self) -> EmbeddedController:
        self._thread.start()
        while not self.server.started and self._thread.is_alive():
            threading.Event().wait(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.controller.release_watchers()
        self._thread.join(timeout=10)
        self.controller.store.close()
        self.sock.close()
