"""Signals, the single-agent guarantee, a truthful stop, and operator control of components."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import alive, wait_for
from tests.integration.hostagent import HostAgent

SLEEPER = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
CRASHER = "raise SystemExit(3)\n"
FAST_FATAL = (
    "restart: {initial_delay: 0, delay: 10ms, max_delay: 20ms, give_up: {starts: 2, window: 1m}}"
)
STUBBORN = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ignoring SIGTERM', flush=True)\ntime.sleep(600)\n"
)


@pytest.fixture
def host(tmp_path: Path) -> Iterator[HostAgent]:
    agent = HostAgent(tmp_path)
    yield agent
    agent.close()


def sig_ignored(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return int(line.split()[1], 16)
    raise AssertionError("no SigIgn")


def test_unused_signals_are_ignored_and_components_keep_defaults(host: HostAgent) -> None:
    host.write({"worker": (SLEEPER, "")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    worker = host.running_pid("worker")
    assert host.proc is not None
    unused = (
        *(signal.SIGUSR1, signal.SIGALRM, signal.SIGPWR, signal.SIGQUIT, signal.SIGRTMIN + 3),
        *(signal.SIGSYS, signal.SIGTRAP),  # these ended the agent with a core dump
    )
    for signum in unused:
        host.signal(signum)
    wait_for(lambda: host.log().count("ignored: the agent does not use it") >= len(unused))
    assert host.proc.poll() is None and host.running_pid("worker") == worker
    # Handled, not SIG_IGN: a component started now inherits no ignored signal.
    assert host.cli("restart", "worker").returncode == 0
    new = host.running_pid("worker")
    assert new is not None and new != worker
    mask = sig_ignored(new)
    for signum in unused:
        assert not mask & (1 << (signum - 1)), signal.Signals(signum).name
    # The agent still obeys the signals it uses.
    host.signal(signal.SIGUSR2)
    assert host.proc.wait(timeout=20) == 0 and not alive(new)


def test_a_second_agent_is_refused_even_when_the_directory_is_recreated(
    host: HostAgent,
) -> None:
    host.write({"worker": (SLEEPER, "")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    second = host.cli("run", timeout=30)
    assert second.returncode == 1
    assert "another xce-agent is running with this state directory" in second.stderr
    # The old lock file was deletable; now even the whole directory may go.
    shutil.rmtree(host.state_dir)
    third = host.cli("run", timeout=30)
    assert third.returncode == 1 and "another xce-agent is running" in third.stderr
    assert len(third.stderr.strip().splitlines()) == 1


def test_stop_is_truthful_when_the_agent_dies_mid_stop(host: HostAgent) -> None:
    host.write({"stubborn": (STUBBORN, "stop_timeout: 3s")})
    host.start()
    wait_for(lambda: host.running_pid("stubborn"))
    wait_for(lambda: "ignoring SIGTERM" in host.log())
    pid = host.running_pid("stubborn")
    assert pid is not None
    stop = subprocess.Popen(
        [sys.executable, "-m", "xce_agent", "stop", "--config", str(host.config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: host.state().get("lifecycle") == "stopping")
    host.kill9()  # the agent dies while its component ignores SIGTERM
    out, err = stop.communicate(timeout=60)
    assert stop.returncode == 0, err
    assert "the agent exited before stopping everything" in out
    assert "stopped stubborn" in out
    assert not alive(pid)
    assert host.state()["lifecycle"] == "stopped"


def test_operator_controls_one_component_at_a_time(host: HostAgent) -> None:
    host.write({"a": (SLEEPER, "stop_timeout: 2s"), "b": (CRASHER, FAST_FATAL)})
    host.start()
    wait_for(lambda: host.running_pid("a") and host.component("b").get("phase") == "fatal")
    a = host.running_pid("a")
    stop = host.cli("stop", "a")
    assert stop.returncode == 0 and stop.stdout.strip() == "xce-agent: a stopped", stop
    assert host.component("a")["phase"] == "stopped" and not alive(a or 0)
    start = host.cli("start", "a")
    assert start.returncode == 0 and "a running, pid" in start.stdout
    a2 = host.running_pid("a")
    restart = host.cli("restart", "a")
    assert restart.returncode == 0, restart
    assert host.running_pid("a") not in (None, a2)
    restarts = host.component("b")["restarts"]
    reset = host.cli("reset", "b")
    # It starts again (the command may see it running, or already fatal again: it crashes).
    assert "b running" in reset.stdout or "b is fatal" in reset.stderr, reset
    wait_for(
        lambda: (
            host.component("b").get("phase") == "fatal"
            and host.component("b")["restarts"] > restarts
        )
    )
    assert "not fatal" in host.cli("reset", "a").stderr
    unknown = host.cli("start", "nope")
    assert unknown.returncode == 1 and "no component 'nope'" in unknown.stderr
    assert host.proc is not None and host.proc.poll() is None


def test_reload_applies_added_removed_and_changed_components(host: HostAgent) -> None:
    host.write({"a": (SLEEPER, ""), "b": (SLEEPER, "")})
    host.start()
    wait_for(lambda: host.running_pid("a") and host.running_pid("b"))
    a, b = host.running_pid("a"), host.running_pid("b")
    good = host.config.read_text()
    host.config.write_text(good.replace("version: 1", "version: 7"))
    bad = host.cli("reload")
    assert bad.returncode == 78 and "version: expected 1, got 7" in bad.stderr
    host.signal(signal.SIGHUP)  # the agent checks too, and changes nothing
    wait_for(lambda: "SIGHUP: config not reloaded" in host.log())
    assert host.running_pid("a") == a and host.running_pid("b") == b
    host.write({"a": (SLEEPER, "environment: {MODE: new}"), "c": (SLEEPER, "")})
    done = host.cli("reload")
    assert done.returncode == 0, done
    assert "removed b" in done.stdout and "added c" in done.stdout
    assert "restarted a" in done.stdout
    assert "config reloaded: removed b, added c" in host.log()  # the journal says what changed
    wait_for(lambda: host.running_pid("c") and host.component("b") == {})
    wait_for(lambda: host.running_pid("a") not in (None, a))
    new_a = host.running_pid("a")
    assert b"MODE=new" in Path(f"/proc/{new_a}/environ").read_bytes()
    assert not alive(b or 0)
    # SIGHUP reloads too.
    host.write({"a": (SLEEPER, "environment: {MODE: new}")})
    host.signal(signal.SIGHUP)
    wait_for(lambda: host.component("c") == {})


def test_the_control_socket_is_root_only(host: HostAgent, tmp_path: Path) -> None:
    host.write({"a": (SLEEPER, "")})
    host.start()
    wait_for(lambda: host.running_pid("a"))
    sock = host.state_dir / "control.sock"
    assert (sock.stat().st_mode & 0o777) == 0o600
    assert (host.state_dir.stat().st_mode & 0o777) == 0o700
    if os.geteuid() != 0:
        pytest.skip("needs root to try as another user")
    probe = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"try:\n    s.connect({str(sock)!r})\n"
        "except OSError as e:\n    print('refused', e.errno); sys.exit(0)\n"
        's.sendall(b\'{"command": "stop-all"}\\n\'); print(s.recv(200).decode().strip())\n'
    )
    system_python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    out = subprocess.run(
        [system_python, "-c", probe],
        user=65534,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.stdout.startswith("refused"), out
    assert host.proc is not None and host.proc.poll() is None
    answer = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe.replace("stop-all", "nonsense")],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    )
    assert answer == {"ok": False, "message": "unknown command 'nonsense'"}


def test_a_recursive_alias_sent_by_sighup_is_refused_and_supervision_goes_on(
    host: HostAgent,
) -> None:
    host.write({"a": (SLEEPER, "restart: {initial_delay: 0, delay: 10ms}")})
    host.start()
    wait_for(lambda: host.running_pid("a"))
    a = host.running_pid("a")
    assert a is not None
    good = host.config.read_text()
    bomb = good.replace("command: [", "command: &r [").replace(".py]", ".py, *r]")
    assert "*r]" in bomb
    host.config.write_text(bomb)
    host.signal(signal.SIGHUP)
    wait_for(lambda: "an alias refers to its own anchor" in host.log(), 10)
    assert "SIGHUP: config not reloaded" in host.log()
    # The loop is not wedged: a killed component is restarted at once.
    os.kill(a, signal.SIGKILL)
    wait_for(lambda: host.running_pid("a") not in (None, a), 10)
    assert host.cli("validate").returncode == 78
    host.config.write_text(good)


def test_hostile_control_clients_do_not_end_the_agent(host: HostAgent) -> None:
    """A 4,000-deep line and 1,100 idle connections under systemd's default of 1,024 fds."""
    import resource
    import socket
    import time

    host.write({"a": (SLEEPER, "")})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        host.start()  # inherits the unit's default soft limit
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    wait_for(lambda: host.running_pid("a"))
    address = str(host.state_dir / "control.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(address)
        sock.sendall(b"[" * 4000 + b"\n")
        assert b"bad request" in sock.recv(4096)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4096), hard))
    idle: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 5
        while len(idle) < 1100 and time.monotonic() < deadline:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.setblocking(False)
            try:
                conn.connect(address)
            except BlockingIOError:  # the backlog is full for a moment: try again
                conn.close()
                continue
            except OSError:  # the agent is gone (the socket with it)
                conn.close()
                raise
            idle.append(conn)
        fds = len(os.listdir(f"/proc/{host.proc.pid}/fd"))  # type: ignore[union-attr]
        assert host.proc is not None and host.proc.poll() is None, host.log()[-2000:]
        assert fds < 200, fds
    finally:
        for conn in idle:
            conn.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    done = host.cli("restart", "a")
    assert done.returncode == 0, done
    assert host.proc.poll() is None


def test_reload_starts_a_changed_component_at_once_instead_of_after_its_backoff(
    host: HostAgent,
) -> None:
    slow = "restart: {initial_delay: 10m, delay: 10m, max_delay: 10m}"
    host.write({"c": (CRASHER, slow)})
    host.start()
    wait_for(lambda: host.component("c").get("phase") == "backoff", timeout=20)
    fixed = host.tmp / "fixed.py"
    fixed.write_text(SLEEPER)
    host.config.write_text(host.config.read_text().replace(str(host.tmp / "c.py"), str(fixed)))
    done = host.cli("reload")
    assert done.returncode == 0 and "restarted c" in done.stdout, done
    wait_for(lambda: host.running_pid("c"), timeout=10)  # not after the 10 minutes' backoff
    assert "reload: c: command changed: restarted now" in host.log()
