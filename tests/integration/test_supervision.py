"""Supervision of real child processes: crash, ignore SIGTERM, grandchildren, instant exit."""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import alive, group_members, wait_for
from xce_agent.supervision.machine import Phase
from xce_agent.supervision.probes import run_probe
from xce_agent.supervision.reactor import Reactor
from xce_agent.supervision.spec import (
    ComponentSpec,
    ProbeKind,
    ProbeSpec,
    RestartPolicy,
    RestartSpec,
)
from xce_agent.supervision.supervisor import Supervisor

PY = sys.executable
FAST = RestartSpec(initial_delay=0, delay=0.05, max_delay=0.2, jitter=0, give_up_starts=50)


class Harness:
    def __init__(self, specs: list[ComponentSpec], output_dir: Path | None) -> None:
        self.reactor = Reactor()
        self.sup = Supervisor(specs, self.reactor, output_dir=output_dir)

    def run_until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"not reached in {timeout}s: {[self.sup.state(n) for n in self.sup.specs]}"
                )
            self.reactor.run_once(max_wait=min(left, 0.1))

    def phase(self, name: str = "c") -> Phase:
        return self.sup.state(name).phase


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[..., Harness]]:
    harnesses: list[Harness] = []

    def build(script: str, output: bool = False, **kw: object) -> Harness:
        kw.setdefault("restart", FAST)
        kw.setdefault("stop_timeout", 2.0)
        spec = ComponentSpec(name="c", command=(PY, "-c", script), **kw)  # type: ignore[arg-type]
        h = Harness([spec], tmp_path / "out" if output else None)
        harnesses.append(h)
        return h

    yield build
    for h in harnesses:
        h.sup.stop_all("test over")
        h.run_until(h.sup.idle, 10)
        h.sup.close()
        h.reactor.close()


def test_crashing_child_is_restarted(make: Callable[..., Harness]) -> None:
    h = make("import time; time.sleep(0.2); raise SystemExit(3)")
    h.sup.start_all()
    h.run_until(lambda: h.phase() is Phase.RUNNING)
    first = h.sup.state("c").pid
    h.run_until(lambda: h.sup.state("c").restarts >= 2)
    state = h.sup.state("c")
    assert state.pid != first
    assert state.last_exit is not None and state.last_exit.code == 3


def test_child_ignoring_sigterm_is_killed_after_stop_timeout(
    make: Callable[..., Harness],
) -> None:
    script = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    h = make(script, stop_timeout=0.5, output=True)
    h.sup.start_all()
    h.run_until(lambda: h.phase() is Phase.RUNNING)
    time.sleep(0.3)  # let it install the handler
    pid = h.sup.state("c").pid
    assert pid is not None
    began = time.monotonic()
    h.sup.stop("c")
    h.run_until(lambda: h.phase() is Phase.STOPPED)
    took = time.monotonic() - began
    assert 0.45 <= took < 3.0
    last = h.sup.state("c").last_exit
    assert last is not None and last.signal == signal.SIGKILL
    assert not alive(pid)


def test_grandchildren_are_stopped_with_the_group(make: Callable[..., Harness]) -> None:
    script = (
        "import subprocess, sys, time\n"
        "sleeper = [sys.executable, '-c', 'import time; time.sleep(60)']\n"
        "for _ in range(3): subprocess.Popen(sleeper)\n"
        "time.sleep(60)\n"
    )
    h = make(script)
    h.sup.start_all()
    h.run_until(lambda: h.phase() is Phase.RUNNING)
    pid = h.sup.state("c").pid
    assert pid is not None
    deadline = time.monotonic() + 5
    while len(group_members(pid)) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(group_members(pid)) == 4
    h.sup.stop("c")
    h.run_until(lambda: h.phase() is Phase.STOPPED)
    deadline = time.monotonic() + 2
    while group_members(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert group_members(pid) == []


def test_strays_of_a_crashed_child_are_cleaned_before_restart(
    make: Callable[..., Harness],
) -> None:
    script = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "time.sleep(0.3)\n"
    )
    h = make(script, restart=RestartSpec(initial_delay=1.0, max_delay=1.0, jitter=0))
    h.sup.start_all()
    h.run_until(lambda: h.phase() is Phase.RUNNING)
    pid = h.sup.state("c").pid
    assert pid is not None
    h.run_until(lambda: h.phase() is Phase.BACKOFF)
    deadline = time.monotonic() + 2
    while group_members(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert group_members(pid) == []


def test_child_exiting_instantly_ends_fatal_and_supervisor_stays_up(
    make: Callable[..., Harness],
) -> None:
    loop = RestartSpec(initial_delay=0, delay=0.01, max_delay=0.02, jitter=0, give_up_starts=5)
    h = make("raise SystemExit(1)", restart=loop)
    h.sup.start_all()
    h.run_until(lambda: h.phase() is Phase.FATAL)
    state = h.sup.state("c")
    assert state.restarts == 4
    assert "crash loop" in state.reason


def test_never_exiting_child_stops_gracefully(make: Callable[..., Harness]) -> None:
    h = make("import time; time.sleep(600)")
    h.sup.start_all()
    h.run_until(lambda: h.phase() is Phase.RUNNING)
    began = time.monotonic()
    h.sup.stop("c")
    h.run_until(lambda: h.phase() is Phase.STOPPED)
    assert time.monotonic() - began < 1.0
    last = h.sup.state("c").last_exit
    assert last is not None and last.signal == signal.SIGTERM


def test_policy_never_leaves_an_exited_child(make: Callable[..., Harness]) -> None:
    h = make("raise SystemExit(0)", restart=RestartSpec(policy=RestartPolicy.NEVER))
    h.sup.start_all()
    h.run_until(lambda: h.phase() is Phase.EXITED)
    assert h.sup.state("c").restarts == 0


def test_output_goes_to_the_log_with_the_component_name(
    make: Callable[..., Harness], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="xce_agent.component")
    h = make(
        "print('hello out'); import sys; print('hello err', file=sys.stderr)",
        output=True,
        restart=RestartSpec(policy=RestartPolicy.NEVER),
    )
    h.sup.start_all()
    h.run_until(lambda: h.phase() is Phase.EXITED)
    lines = [r.getMessage() for r in caplog.records if r.name == "xce_agent.component"]
    assert "c: hello out" in lines and "c: hello err" in lines


def test_missing_program_is_reported_and_ends_fatal(make: Callable[..., Harness]) -> None:
    spec = ComponentSpec(
        name="c",
        command=("/nonexistent/prog",),
        restart=RestartSpec(initial_delay=0, delay=0.01, max_delay=0.01, give_up_starts=3),
    )
    h = Harness([spec], None)
    h.sup.start_all()
    h.run_until(lambda: h.phase() is Phase.FATAL)
    last = h.sup.state("c").last_exit
    assert last is not None and "No such file" in last.describe()
    h.reactor.close()


def test_failing_tcp_probe_restarts_the_component(make: Callable[..., Harness]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connections are refused
    probe = ProbeSpec(
        ProbeKind.TCP,
        host="127.0.0.1",
        port=port,
        initial_delay=0.05,
        period=0.05,
        timeout=0.5,
        failure_threshold=2,
    )
    h = make("import time; time.sleep(60)", liveness=probe)
    h.sup.start_all()
    h.run_until(lambda: h.phase() is Phase.RUNNING)
    first = h.sup.state("c").pid
    h.run_until(lambda: h.sup.state("c").restarts >= 1 and h.phase() is Phase.RUNNING)
    assert h.sup.state("c").pid != first
    assert h.sup.state("c").last_exit is not None


def test_passing_exec_probe_keeps_the_component(
    make: Callable[..., Harness], tmp_path: Path
) -> None:
    runs = tmp_path / "probe-runs"
    command = ("/bin/sh", "-c", f"echo run >> {runs}")
    probe = ProbeSpec(ProbeKind.EXEC, command=command, initial_delay=0.0, period=0.05)
    h = make("import time; time.sleep(60)", liveness=probe)
    h.sup.start_all()
    h.run_until(lambda: h.phase() is Phase.RUNNING)
    pid = h.sup.state("c").pid
    h.run_until(lambda: runs.exists() and len(runs.read_text().splitlines()) >= 5)
    assert h.sup.state("c").restarts == 0 and h.sup.state("c").pid == pid


def test_failing_exec_probe_restarts_the_component(
    make: Callable[..., Harness], tmp_path: Path
) -> None:
    runs = tmp_path / "probe-runs"
    command = ("/bin/sh", "-c", f"echo run >> {runs}; exit 1")
    probe = ProbeSpec(
        ProbeKind.EXEC, command=command, initial_delay=0.0, period=0.05, failure_threshold=1
    )
    h = make("import time; time.sleep(60)", liveness=probe)
    h.sup.start_all()
    h.run_until(lambda: h.phase() is Phase.RUNNING)
    first = h.sup.state("c").pid
    h.run_until(lambda: h.sup.state("c").restarts >= 1 and h.phase() is Phase.RUNNING)
    assert h.sup.state("c").pid != first
    assert runs.read_text().count("run") >= 1
    assert h.sup.state("c").last_exit is not None


def test_http_probe_follows_the_status_code() -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from xce_agent.supervision.probes import run_probe

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 503)
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        # Generous timeouts: the probe's own deadline is not what this test measures.
        ok = run_probe(ProbeSpec(ProbeKind.HTTP, url=f"{base}/healthz", timeout=10))
        bad = run_probe(ProbeSpec(ProbeKind.HTTP, url=f"{base}/other", timeout=10))
        assert ok == (True, "http probe got status 200"), ok
        assert bad == (False, "http probe got status 503"), bad
    finally:
        server.shutdown()
        server.server_close()
    # A port bound but not listening refuses connections, and nobody else can take it meanwhile
    # (a port merely closed may be reused by another process, which then answers the probe).
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        gone = run_probe(
            ProbeSpec(ProbeKind.HTTP, url=f"http://127.0.0.1:{held.getsockname()[1]}", timeout=1)
        )
    assert gone[0] is False and gone[1].startswith("http probe failed"), gone


def test_http_probe_asks_the_component_itself_not_a_proxy_nor_a_redirect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    hits: dict[str, int] = {"component": 0, "elsewhere": 0}

    def handler(name: str, status: int, location: str = "") -> type[BaseHTTPRequestHandler]:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                hits[name] += 1
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

        return Handler

    elsewhere = ThreadingHTTPServer(("127.0.0.1", 0), handler("elsewhere", 200))
    there = f"http://127.0.0.1:{elsewhere.server_address[1]}"
    component = ThreadingHTTPServer(("127.0.0.1", 0), handler("component", 302, there + "/"))
    for server in (elsewhere, component):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    # A proxy for the way out, as a site's environment may set: the elsewhere server stands
    # in for it (a proxy would answer for the component; it must not be asked).
    monkeypatch.setenv("http_proxy", there)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    try:
        url = f"http://127.0.0.1:{component.server_address[1]}/healthz"
        got = run_probe(ProbeSpec(ProbeKind.HTTP, url=url, timeout=10))
    finally:
        for server in (elsewhere, component):
            server.shutdown()
            server.server_close()
    assert hits == {"component": 1, "elsewhere": 0}, hits
    assert got == (True, "http probe got status 302"), got


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (b"ZZHTTP/1.0 200 OK\r\n\r\n", "BadStatusLine: ZZHTTP/1.0 200 OK\\r\\n"),
        (b"HTTP/1.0 2\x1b[2J0 OK\r\n\r\n", "BadStatusLine: HTTP/1.0 2\\x1b[2J0 OK\\r\\n"),
        (b"HTTP/1.0 " + b"9" * 70000 + b"\r\n", "LineTooLong: got more than 65536 bytes when"),
    ],
    ids=["prefixed", "escape", "endless"],
)
def test_a_garbled_http_answer_fails_the_probe_on_one_printable_line(
    answer: bytes, said: str
) -> None:
    import threading

    asked = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def serve() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                asked.set()  # the probe's request arrived: the answer below is what it read
                with contextlib.suppress(OSError):
                    conn.sendall(answer)

        threading.Thread(target=serve, daemon=True).start()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/healthz"
        ok, detail = run_probe(ProbeSpec(ProbeKind.HTTP, url=url, timeout=10))
    assert asked.is_set()
    assert ok is False
    assert detail.startswith(f"http probe failed: {said}"), detail
    assert detail.isprintable() and len(detail) <= len("http probe failed: ") + 160, detail


def test_a_removed_component_added_back_runs_again(make: Callable[..., Harness]) -> None:
    h = make("import time; time.sleep(60)")
    h.sup.start_all()
    h.run_until(lambda: h.phase() is Phase.RUNNING)
    first = h.sup.state("c").pid
    spec = h.sup.specs["c"]
    h.sup.remove("c", "removed from the config")
    assert "c" in h.sup.retiring
    h.sup.add(spec)  # a reload put it back before the stop finished
    h.sup.start("c", "added by a reload")
    h.run_until(lambda: h.phase() is Phase.RUNNING and h.sup.state("c").pid != first)
    assert "c" in h.sup.specs and "c" not in h.sup.retiring


def test_a_removed_component_is_forgotten_once_stopped(make: Callable[..., Harness]) -> None:
    h = make("import time; time.sleep(60)")
    h.sup.start_all()
    h.run_until(lambda: h.phase() is Phase.RUNNING)
    pid = h.sup.state("c").pid
    assert pid is not None
    h.sup.remove("c", "removed from the config")
    h.sup.start("c", "too late")  # ignored: it only stops now
    h.run_until(lambda: "c" not in h.sup.specs)
    assert not alive(pid)


def _running_with_arg(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if entry.isdigit() and marker in Path(f"/proc/{entry}/cmdline").read_text():
                found.append(int(entry))
    return found


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_an_exec_probe_runs_as_the_component_user_and_leaves_nothing(tmp_path: Path) -> None:
    """Probes ran as root for a `user: nobody` component, and whatever a probe left in its
    process group ran on forever, past `xce-agent stop` (one more every period)."""
    uid = pwd.getpwnam("nobody").pw_uid
    marker = f"{os.getpid()}.{time.monotonic_ns() % 1000}"
    command = ("/bin/sh", "-c", f"(sleep 6{marker} &); sleep 0.1; test $(id -u) = {uid}")
    ok, detail = run_probe(ProbeSpec(ProbeKind.EXEC, command=command, user="nobody", timeout=5))
    assert ok, detail  # it ran, as nobody
    wait_for(lambda: not _running_with_arg(f"sleep 6{marker}"), 5)


def test_a_start_waits_while_the_previous_scope_is_still_known_to_systemd() -> None:
    """systemd keeps an emptied scope for a few ms, and the same unit name cannot start
    again until then: the start is deferred (not blocked on), then goes ahead."""
    from xce_agent.supervision.process import ProcessRunner

    class LingeringScope(ProcessRunner):
        asked = 0

        def ready(self, spec: ComponentSpec) -> bool:
            self.asked += 1
            return self.asked > 5

    runner = LingeringScope()
    reactor = Reactor()
    spec = ComponentSpec("c", (PY, "-c", "import time; time.sleep(60)"), restart=FAST)
    sup = Supervisor([spec], reactor, runner)
    try:
        sup.start("c")
        assert sup.state("c").phase is Phase.STARTING and runner.asked == 1
        deadline = time.monotonic() + 10
        while sup.state("c").phase is not Phase.RUNNING and time.monotonic() < deadline:
            reactor.run_once(max_wait=0.05)
        assert sup.state("c").phase is Phase.RUNNING and runner.asked == 6
        pid = sup.state("c").pid
        assert pid is not None and alive(pid)
        sup.stop("c")
        while sup.state("c").phase is not Phase.STOPPED and time.monotonic() < deadline:
            reactor.run_once(max_wait=0.05)
        assert not alive(pid)
    finally:
        sup.close()
        reactor.close()
