"""Adoption that cannot adopt the wrong process, and config changes applied across restarts.

Each test first reproduces what used to fool the agent (a job adopted as the worker by its
environment markers, an edited state file, an edited command, a removed component) and then
shows the agent acting on the real process only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import alive, wait_for
from tests.integration.hostagent import HostAgent, wait_alive

SLEEPER = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
STUBBORN = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ignoring SIGTERM', flush=True)\ntime.sleep(600)\n"
)


def worker_with_job(job_file: Path) -> str:
    return (
        "import subprocess, sys, time\n"
        "job = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
        " start_new_session=True)\n"
        f"open({str(job_file)!r}, 'w').write(str(job.pid))\n"
        "time.sleep(600)\n"
    )


@pytest.fixture
def host(tmp_path: Path) -> Iterator[HostAgent]:
    agent = HostAgent(tmp_path)
    yield agent
    agent.close()


def test_a_job_of_the_worker_is_never_adopted_as_the_worker(
    host: HostAgent, tmp_path: Path
) -> None:
    job_file = tmp_path / "job.pid"
    host.write({"worker": (worker_with_job(job_file), "stop_timeout: 2s")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    worker = host.running_pid("worker")
    job = wait_alive(job_file)
    host.strays.append(job)
    environ = Path(f"/proc/{job}/environ").read_bytes()
    assert b"XCE_AGENT_COMPONENT=worker" in environ  # the job carries the markers
    # The agent and the worker die; the job (own session, same markers) lives on.
    host.kill9()
    assert worker is not None
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: not alive(worker))
    host.start()
    wait_for(lambda: host.running_pid("worker") not in (None, worker))
    new = host.running_pid("worker")
    assert new != job
    assert "adopted" not in host.log()
    assert "recorded process" in host.log()  # the old record was judged, and found gone


def test_a_state_file_naming_another_process_adopts_nothing(
    host: HostAgent, tmp_path: Path
) -> None:
    host.write({"worker": (SLEEPER, "stop_timeout: 2s")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    worker = host.running_pid("worker")
    assert worker is not None
    host.detach()
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: not alive(worker))
    # Someone points the record at a stranger: by pid only, then with its exact start time.
    original = host.component("worker")["identity"]
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    host.strays.append(stranger.pid)
    ticks = int(Path(f"/proc/{stranger.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    for forged in ({"pid": stranger.pid}, {"pid": stranger.pid, "start_ticks": ticks}):
        state = host.state()
        record = state["components"][0]
        record["identity"] = {**original, **forged}
        record["phase"], record["pid"] = "running", stranger.pid
        (host.state_dir / "state.json").write_text(json.dumps(state))
        host.start()
        wait_for(lambda: host.running_pid("worker") not in (None, stranger.pid))
        assert f"adopted running process {stranger.pid}" not in host.log()
        stop = host.cli("stop", "--timeout", "20")
        assert stop.returncode == 0, stop.stderr
        assert host.proc is not None and host.proc.wait(timeout=5) == 0
        assert alive(stranger.pid), "a stranger must never be signalled"
    stranger.kill()
    stranger.wait()


def test_an_edited_command_replaces_the_old_process(host: HostAgent) -> None:
    host.write({"worker": (SLEEPER, "stop_timeout: 2s")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    old = host.running_pid("worker")
    assert old is not None
    host.detach()
    text = host.config.read_text().replace("worker.py]", "worker.py, --edited]")
    host.config.write_text(text)
    host.start()
    wait_for(lambda: host.running_pid("worker") not in (None, old), 20)
    wait_for(lambda: not alive(old))
    new = host.running_pid("worker")
    assert Path(f"/proc/{new}/cmdline").read_bytes().endswith(b"--edited\0")
    assert host.component("worker")["identity"]["command"][-1] == "--edited"
    assert "its configured command or settings changed" in host.log()


def test_a_removed_component_is_stopped_to_the_end_and_then_forgotten(
    host: HostAgent,
) -> None:
    host.write({"keep": (SLEEPER, ""), "gone": (STUBBORN, "stop_timeout: 1s")})
    host.start()
    wait_for(lambda: host.running_pid("gone") and host.running_pid("keep"))
    wait_for(lambda: "ignoring SIGTERM" in host.log())
    stubborn = host.running_pid("gone")
    assert stubborn is not None
    host.detach()
    host.write({"keep": (SLEEPER, "")})
    host.start()
    # It stays in the state while it is being stopped (it ignores SIGTERM: 1 s, then SIGKILL).
    wait_for(lambda: host.component("gone").get("phase") == "stopping", 10)
    began = time.monotonic()
    assert "no longer configured" in host.component("gone")["note"]
    wait_for(lambda: not alive(stubborn), 10)
    assert time.monotonic() - began >= 0.5  # SIGTERM was ignored: SIGKILL after 1 s
    wait_for(lambda: host.component("gone") == {}, 10)
    assert "gone: removed" in host.log()
    assert host.running_pid("keep") is not None
    assert "gone: stopping -> starting" not in host.log()


def test_status_is_stale_after_the_agent_is_killed(host: HostAgent) -> None:
    host.write({"worker": (SLEEPER, "")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    worker = host.running_pid("worker")
    assert worker is not None
    wait_for(lambda: "up" in host.component("worker").get("tail", []), 10)
    live = host.cli("status")
    assert "STALE" not in live.stdout and "running" in live.stdout
    assert "  | up" in live.stdout
    host.kill9()
    stale = host.cli("status")
    assert stale.stdout.startswith("STALE: the agent is not running")
    assert "unsupervised" in stale.stdout
    data = json.loads(host.cli("status", "--json").stdout)
    assert data["stale"] is True and data["agent_running"] is False
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: not alive(worker))
    assert " gone " in host.cli("status").stdout


def test_leftover_temp_files_are_removed_at_start(host: HostAgent) -> None:
    host.write({"worker": (SLEEPER, "")})
    host.state_dir.mkdir(mode=0o700)
    leftovers = [host.state_dir / f".state.json.tmp{i}" for i in range(3)]
    for path in leftovers:
        path.write_text("{")
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    assert not any(path.exists() for path in leftovers)
    assert "removed 3 temporary state files" in host.log()
    if host.env.get("XCE_AGENT_CGROUP") is None:
        assert "containment: process groups" in host.cli("status").stdout


def test_a_renamed_worker_never_runs_twice(host: HostAgent) -> None:
    host.write({"worker": (SLEEPER, "stop_timeout: 2s")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    old = host.running_pid("worker")
    assert old is not None
    host.detach()
    host.write({"worker2": (SLEEPER, "stop_timeout: 2s")})
    host.start()
    wait_for(lambda: host.running_pid("worker2") and not alive(old))
    wait_for(lambda: host.component("worker") == {})
    assert [c["name"] for c in host.state()["components"]] == ["worker2"]


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def test_an_agent_refused_at_start_keeps_the_recorded_components(host: HostAgent) -> None:
    """The agent killed but not reaped yet still counts as live; the one refused must not
    overwrite the state with empty records, or the next agent starts a second worker."""
    host.write({"worker": (SLEEPER, "stop_timeout: 2s")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    worker = host.running_pid("worker")
    assert host.proc is not None
    first = host.proc
    first.kill()  # not waited for: a zombie with its recorded pid and start time
    wait_for(lambda: _zombie(first.pid))
    second = host.cli("run")
    assert second.returncode == 1
    assert f"pid {first.pid}, recorded in its state" in second.stderr  # the input arrived
    assert host.running_pid("worker") == worker
    assert host.component("worker")["identity"]["pid"] == worker
    first.wait()
    host.start()
    wait_for(lambda: f"adopted running process {worker}" in host.log())
    assert host.running_pid("worker") == worker
    assert "worker: starting -> running" not in host.log().split("adopted running")[-1]


def test_an_agent_failing_at_start_keeps_the_recorded_components(host: HostAgent) -> None:
    host.write({"worker": (SLEEPER, "stop_timeout: 2s")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    worker = host.running_pid("worker")
    host.detach()
    (host.state_dir / "control.sock").unlink(missing_ok=True)
    (host.state_dir / "control.sock" / "in-the-way").mkdir(parents=True)
    failed = host.cli("run")
    assert failed.returncode == 1
    assert "control.sock" in failed.stderr and "Traceback" not in failed.stderr
    assert host.component("worker")["identity"]["pid"] == worker
    (host.state_dir / "control.sock" / "in-the-way").rmdir()
    (host.state_dir / "control.sock").rmdir()
    host.start()
    wait_for(lambda: f"adopted running process {worker}" in host.log())
    assert host.running_pid("worker") == worker


EXECS = (
    "import os, sys, time\ntime.sleep(0.3)\n"
    "os.execv(sys.executable, [sys.executable, '-c',"
    " 'import time; print(\"exec done\", flush=True); time.sleep(600)'])\n"
)


def test_a_component_that_execs_after_its_start_is_adopted_not_duplicated(
    host: HostAgent,
) -> None:
    """A wrapper that sets up and then execs the daemon (or a daemon that re-execs itself)
    is still the process the agent started: it is adopted, and stopped by `stop`."""
    host.write({"worker": (EXECS, "stop_timeout: 2s")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    worker = host.running_pid("worker")
    assert worker is not None
    host.strays.append(worker)
    wait_for(lambda: "exec done" in host.log())
    assert "import time" in Path(f"/proc/{worker}/cmdline").read_text()  # it did exec
    host.detach()
    host.start()
    wait_for(lambda: "worker: " in host.log().split("components are contained by")[-1])
    wait_for(lambda: f"adopted running process {worker}" in host.log(), 10)
    assert host.running_pid("worker") == worker
    assert "stopped -> starting" not in host.log().split("SIGTERM: exiting")[-1]
    assert host.cli("stop", "--timeout", "20").returncode == 0
    assert not alive(worker)


def test_a_shared_directory_as_state_directory_is_refused_untouched(host: HostAgent) -> None:
    """`state_directory: /var/lib` (or /tmp, /): the agent used to chown it to root and
    chmod it 0700, locking every other user and service out of it."""
    host.write({"worker": (SLEEPER, "")})
    shared = host.state_dir
    shared.mkdir(mode=0o755)
    (shared / "postgresql").mkdir()
    os.chown(shared, 65534, 65534)
    refused = host.cli("run", timeout=30)
    assert refused.returncode == 1
    assert "postgresql" in refused.stderr and len(refused.stderr.splitlines()) == 1
    st = shared.stat()
    assert (st.st_mode & 0o777, st.st_uid) == (0o755, 65534)
    assert sorted(p.name for p in shared.iterdir()) == ["postgresql"]
    (shared / "postgresql").rmdir()  # a directory of the agent's own: it starts
    (shared / "notice-worker.json").write_text("{}")  # the agent's own files are fine
    (shared / "state.json.corrupt-1").write_text("{")
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    assert (shared.stat().st_mode & 0o777, shared.stat().st_uid) == (0o700, 0)


def test_limits_that_cannot_be_enforced_are_said_so_in_status(host: HostAgent) -> None:
    """No cgroup and no systemd (a plain shell): the limits are not enforced, never silently."""
    host.write({"worker": (SLEEPER, "limits: {memory_max: 64M, tasks_max: 10}")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    status = host.cli("status").stdout
    assert "containment: process groups" in status
    assert "limits: NOT enforced: no cgroup (process groups)" in status
    assert "worker: limits NOT enforced" in host.log()
    assert host.cli("stop", "--timeout", "20").returncode == 0
