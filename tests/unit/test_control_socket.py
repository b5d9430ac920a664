"""The control socket under hostile use: nothing a client sends or holds open ends the agent."""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import wait_for
from xce_agent.operator.control import (
    MAX_CONNECTIONS,
    Answer,
    ControlServer,
    nesting,
    request,
)
from xce_agent.supervision.reactor import Reactor


class Served:
    """A ControlServer on a reactor in its own thread; `errors` holds what escaped the loop."""

    def __init__(self, path: Path, handler: object = None) -> None:
        self.path = path
        self.reactor = Reactor()
        self.calls: list[tuple[str, str]] = []
        self.server = ControlServer(path, self.reactor, handler or self._handle)  # type: ignore[arg-type]
        self.errors: list[BaseException] = []
        self.done = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _handle(self, command: str, name: str) -> Answer:
        self.calls.append((command, name))
        return Answer(True, f"{command} {name}")

    def _run(self) -> None:
        try:
            while not self.done:
                self.reactor.run_once(max_wait=0.05)
        except BaseException as exc:  # what would have ended the agent
            self.errors.append(exc)

    def raw(self, data: bytes) -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(self.path))
            sock.sendall(data)
            return sock.recv(65536)

    def close(self) -> None:
        self.done = True
        self.thread.join(10)
        self.server.close()
        self.reactor.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = Served(tmp_path / "control.sock")
    yield s
    s.close()


def test_deep_json_is_a_bad_request_not_a_recursion_error(served: Served) -> None:
    for line in (b"[" * 4000, b"{" * 2000, b'{"command": ' + b"[" * 3000):
        assert b'"bad request"' in served.raw(line + b"\n")
    assert served.errors == [] and served.thread.is_alive()
    assert request(served.path, "restart", "w") == Answer(True, "restart w")


def test_nesting_is_counted_outside_strings() -> None:
    assert nesting(b'{"command": "[[[[[[[[[[[[", "name": "{{{{{{{{{{"}') == 1
    assert nesting(b'{"a": "\\"[[[[[[[[[[[[[["}') == 1
    assert nesting(b"[[[]]]") == 3


def test_idle_connections_are_bounded_and_closed_at_once(served: Served) -> None:
    idle = []
    try:
        for _ in range(MAX_CONNECTIONS * 4):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(served.path))
            idle.append(sock)
        wait_for(lambda: len(served.server._conns) == MAX_CONNECTIONS, 10)
        # The excess was closed by the server: reading gives end of file at once.
        closed = 0
        for sock in idle:
            sock.settimeout(0.0)
            with contextlib.suppress(BlockingIOError):
                closed += sock.recv(1) == b""
        assert closed >= MAX_CONNECTIONS * 2
    finally:
        for sock in idle:
            sock.close()
    # The held ones time out; the operator gets in again.
    wait_for(lambda: not served.server._conns, 10)
    assert request(served.path, "stop", "w") == Answer(True, "stop w")
    assert served.errors == []


def test_out_of_descriptors_pauses_accepting_and_recovers(served: Served) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    filler: list[int] = []
    served.done = True
    served.thread.join(10)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        client.connect(str(served.path))
        client.sendall(b'{"command": "reset", "name": "w"}\n')
        with contextlib.suppress(OSError):
            while True:
                filler.append(os.open("/dev/null", os.O_RDONLY))
        served.reactor.run_once(max_wait=0.2)  # accept fails with EMFILE: paused, not raised
        assert served.calls == []
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    served.done = False
    served.thread = threading.Thread(target=served._run, daemon=True)
    served.thread.start()
    client.settimeout(10)
    assert b'"reset w"' in client.recv(65536)
    client.close()
    assert served.errors == []


def test_a_failing_handler_is_answered_and_the_loop_goes_on(tmp_path: Path) -> None:
    def handler(command: str, name: str) -> Answer:
        if name == "boom":
            raise RuntimeError("boom")
        return Answer(True, "fine")

    s = Served(tmp_path / "control.sock", handler)
    try:
        assert request(s.path, "start", "boom") == Answer(False, "internal error: RuntimeError")
        assert request(s.path, "start", "w") == Answer(True, "fine")
        assert s.errors == []
    finally:
        s.close()
