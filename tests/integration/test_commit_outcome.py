"""A commit whose answer never comes: what the store says must match what the database did.

A proxy between the store and PostgreSQL forwards every byte, until a chosen statement goes
by; from then on it forwards nothing back, as a connection lost on the way back does. The
store's deadline cuts the call (pg_deadline.py). Cut after the COMMIT was sent, the change
was stored and the store says the outcome is unknown (OutcomeUnknown), never "nothing was
changed"; cut before it, the server rolls the transaction back and the store says so.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

import pytest

from tests.pg_server import PgCluster
from xce_controller.admin_verbs import Expectation
from xce_controller.core.config import load_cluster_config
from xce_controller.service import Controller
from xce_controller.store.base import OutcomeUnknown, StorageUnavailable
from xce_controller.store.open import open_store

CONFIG = """\
version: 1
auth: {admin_token: adm1n-t0ken, join_token: j0in-t0ken}
templates:
  default: {slots: 1}
"""


class MuteProxy:
    """127.0.0.1:port to the server's unix socket; once `trigger` has gone to the server
    (armed), the server's answers are no longer forwarded."""

    def __init__(self, server_socket: str) -> None:
        self.server_socket = server_socket
        self.trigger = b""
        self.armed = False
        self.muted = threading.Event()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # close() shut the listener down
                return
            server = socket.socket(socket.AF_UNIX)
            self._sockets += [client, server]
            try:
                server.connect(self.server_socket)
            except OSError:  # the database is gone: refused, as a dead server's port is
                client.close()
                server.close()
                continue
            threading.Thread(target=self._up, args=(client, server), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while data := _recv(client):
                if self.armed and self.trigger in data:
                    self.muted.set()  # before the server can answer
                _send(server, data)
        finally:  # closed here too: one accepted after close() would be left open
            client.close()
            server.close()

    def _down(self, server: socket.socket, client: socket.socket) -> None:
        try:
            while data := _recv(server):
                if not self.muted.is_set():
                    _send(client, data)
        finally:
            client.close()
            server.close()

    def close(self) -> None:
        # Closing a listening socket does not wake a thread blocked in accept() on Linux:
        # the port would go on accepting into a later test. shutdown() does wake it.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._acceptor.join(timeout=5)
        assert not self._acceptor.is_alive(), "the proxy still accepts after close()"
        for sock in self._sockets:
            # shutdown() first for the same reason: a thread blocked in recv() on a socket
            # only closed keeps it open, and the peer (a store's connection) never hears.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _send(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):
        sock.sendall(data)


@pytest.mark.parametrize(
    ("trigger", "stored"), [(b"COMMIT\x00", True), (b"pg_advisory_xact_lock", False)]
)
def test_a_commit_cut_says_unknown_only_when_the_commit_was_sent(
    tmp_path: Path, pg: PgCluster, trigger: bytes, stored: bool
) -> None:
    direct = pg.database()
    via_proxy = direct.replace(f"host={pg.primary.socket} port={pg.primary.port}", "")
    proxy = MuteProxy(f"{pg.primary.socket}/.s.PGSQL.{pg.primary.port}")
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    ctl = Controller(
        load_cluster_config(config),
        open_store(f"host=127.0.0.1 port={proxy.port} {via_proxy}"),
    )
    try:
        ctl.expect("admin", Expectation(instance_id="i-0", template="default"))  # answered
        proxy.trigger, proxy.armed = trigger, True
        with pytest.raises(StorageUnavailable) as raised:
            ctl.expect("admin", Expectation(instance_id="i-1", template="default"))
        assert proxy.muted.is_set()  # the statement went by and its answer was held back
    finally:
        ctl.store.close()
        proxy.close()
    store = open_store(direct)
    try:
        got = [f.data["instance_id"] for f in store.facts() if f.kind == "expected"]
    finally:
        store.close()
    assert got == (["i-0", "i-1"] if stored else ["i-0"])
    assert isinstance(raised.value, OutcomeUnknown) is stored, raised.value
    assert "did not answer within" in raised.value.cause
