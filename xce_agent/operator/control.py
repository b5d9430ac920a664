"""Operator control of the running agent over a local unix socket (root only).

`STATE_DIR/control.sock`, mode 0600 in a 0700 directory, and every connection's peer must
be root or the agent's own user (SO_PEERCRED). One request, one answer, each a JSON line:
`{"command": "start", "name": "xce-worker"}` -> `{"ok": true, "message": "..."}`. The
server runs on the agent's event loop and never blocks it: requests are read without
blocking, are at most MAX_REQUEST bytes nested at most MAX_NESTING deep (checked before the
JSON parser sees them), a connection that sends nothing useful within a second is dropped,
and at most MAX_CONNECTIONS wait at once (more are closed at once). No request, however
malformed, and no failure to accept (EMFILE) ends the agent: it is answered or logged.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xce_agent.supervision.reactor import Reactor, TimerHandle

SOCKET_NAME = "control.sock"
log = logging.getLogger(__name__)

MAX_REQUEST = 4096
MAX_NESTING = 8
MAX_CONNECTIONS = 32
ACCEPT_PAUSE = 1.0  # seconds without accepting after EMFILE: the backlog waits meanwhile
# "saving": whether the agent's last save of its state reached the disk (for `status`).
COMMANDS = ("start", "stop", "restart", "reset", "reload", "stop-all", "saving")


@dataclass(frozen=True)
class Answer:
    ok: bool
    message: str
    pending: bool = False  # taken, but it happens later (a singleton waits for its lease)


Handler = Callable[[str, str], Answer]


class _Address:
    """A socket path short enough for sun_path (108 bytes), however deep the directory is.

    A long path is reached through /proc/self/fd/N of the directory, which bind() and
    connect() resolve like any other path.
    """

    def __init__(self, path: Path) -> None:
        self.fd = -1
        self.name = str(path)
        if len(os.fsencode(self.name)) >= 100:
            self.fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            self.name = f"/proc/self/fd/{self.fd}/{path.name}"

    def __enter__(self) -> str:
        return self.name

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)


class ControlServer:
    def __init__(self, path: Path, reactor: Reactor, handler: Handler) -> None:
        self.path = path
        self.reactor = reactor
        self.handler = handler
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old = os.umask(0o177)
        try:
            with _Address(path) as address:
                self.sock.bind(address)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self.sock.listen(8)
        self.sock.setblocking(False)
        reactor.add_reader(self.sock.fileno(), self._accept)
        self._conns: dict[int, tuple[socket.socket, bytearray, TimerHandle]] = {}
        self._paused: TimerHandle | None = None

    def _accept(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._pause_accepting(exc)
            return
        try:
            self._admit(conn)
        except OSError as exc:  # the peer went away between accept and the first call
            log.debug("control connection dropped: %s", exc)
            conn.close()

    def _admit(self, conn: socket.socket) -> None:
        if len(self._conns) >= MAX_CONNECTIONS:
            conn.close()  # at once: idle connections must not pile up to the fd limit
            return
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid not in (0, os.geteuid()):
            self._send(conn, Answer(False, "permission denied: root only"))
            conn.close()
            return
        conn.setblocking(False)
        fd = conn.fileno()
        timer = self.reactor.call_later(1.0, lambda: self._drop(fd))
        self._conns[fd] = (conn, bytearray(), timer)
        self.reactor.add_reader(fd, lambda: self._read(fd))

    def _pause_accepting(self, exc: OSError) -> None:
        """Out of descriptors (or memory): stop accepting for a while, never spin or exit."""
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        log.warning("control socket: cannot accept (%s); pausing %.0fs", name, ACCEPT_PAUSE)
        self.reactor.remove_reader(self.sock.fileno())
        self._paused = self.reactor.call_later(ACCEPT_PAUSE, self._resume_accepting)

    def _resume_accepting(self) -> None:
        self._paused = None
        if self.sock.fileno() >= 0:
            self.reactor.add_reader(self.sock.fileno(), self._accept)

    def _read(self, fd: int) -> None:
        entry = self._conns.get(fd)
        if entry is None:
            return
        conn, buffer, _ = entry
        try:
            data = conn.recv(MAX_REQUEST)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        buffer.extend(data)
        if b"\n" not in buffer and data and len(buffer) <= MAX_REQUEST:
            return
        answer = self._answer(bytes(buffer)) if b"\n" in buffer else Answer(False, "bad request")
        self._send(conn, answer)
        self._drop(fd)

    def _answer(self, raw: bytes) -> Answer:
        line = raw.split(b"\n", 1)[0]
        if len(line) > MAX_REQUEST or nesting(line) > MAX_NESTING:
            return Answer(False, "bad request")
        try:
            request = json.loads(line)
            command, name = str(request["command"]), str(request.get("name") or "")
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return Answer(False, "bad request")
        if command not in COMMANDS:
            return Answer(False, f"unknown command {command!r}")
        try:
            return self.handler(command, name)
        except Exception as exc:  # one request's failure is answered, the agent goes on
            log.exception("control request %r %r failed", command, name)
            return Answer(False, f"internal error: {type(exc).__name__}")

    def _send(self, conn: socket.socket, answer: Answer) -> None:
        reply: dict[str, object] = {"ok": answer.ok, "message": answer.message}
        if answer.pending:
            reply["pending"] = True
        line = json.dumps(reply) + "\n"
        with contextlib.suppress(OSError):
            conn.setblocking(True)
            conn.settimeout(1.0)
            conn.sendall(line.encode())

    def _drop(self, fd: int) -> None:
        entry = self._conns.pop(fd, None)
        if entry is None:
            return
        conn, _, timer = entry
        timer.cancel()
        self.reactor.remove_reader(fd)
        conn.close()

    def close(self) -> None:
        for fd in list(self._conns):
            self._drop(fd)
        if self._paused is not None:
            self._paused.cancel()
        self.reactor.remove_reader(self.sock.fileno())
        self.sock.close()
        with contextlib.suppress(OSError):
            self.path.unlink()


def nesting(line: bytes) -> int:
    """How deep `[` and `{` nest in a JSON text, outside strings; counted without recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in line:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def request(path: Path, command: str, name: str = "", timeout: float = 10.0) -> Answer:
    """Ask the running agent; OSError when no agent listens there."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        with _Address(path) as address:
            sock.connect(address)
        sock.sendall((json.dumps({"command": command, "name": name}) + "\n").encode())
        data = b""
        while b"\n" not in data and len(data) < 65536:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    try:
        reply = json.loads(data.split(b"\n", 1)[0])
        return Answer(bool(reply["ok"]), str(reply["message"]), reply.get("pending") is True)
    except (ValueError, KeyError, TypeError):
        return Answer(False, "the agent sent no usable answer")
