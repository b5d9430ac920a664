"""A stopped agent leaves no frozen metrics: its textfile says `xce_agent_up 0` and nothing
else of its state, whether it stopped (xce-agent stop), detached (SIGTERM) or failed to
start; a file a killed agent left is cleaned by the next agent; an agent refused because
another one runs leaves that one's file alone."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import wait_for
from tests.integration.hostagent import AGENT, HostAgent

SLEEPER = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
UP = 'xce_agent_component_up{component="worker",role="provisioner"} 1'


@pytest.fixture
def host(tmp_path: Path) -> Iterator[HostAgent]:
    agent = HostAgent(tmp_path)
    agent.write({"worker": (SLEEPER, "stop_timeout: 2s")})
    textfile = tmp_path / "node-exporter" / "xce-agent.prom"
    textfile.parent.mkdir()
    agent.config.write_text(agent.config.read_text() + f"metrics: {{textfile: '{textfile}'}}\n")
    yield agent
    agent.close()


def _textfile(host: HostAgent) -> str:
    try:
        return (host.tmp / "node-exporter" / "xce-agent.prom").read_text()
    except OSError:
        return ""


def _up(host: HostAgent) -> bool:
    text = _textfile(host)
    return "\nxce_agent_up 1\n" in text and UP in text


def _down(text: str) -> bool:
    """The down text: up 0, the instance, not decommissioned, and no other series."""
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    return series == [
        "xce_agent_up 0",
        'xce_agent_info{instance_id="i-test"} 1',
        "xce_agent_decommissioned 0",
    ]


def test_a_stopped_or_detached_agent_marks_its_textfile_down(host: HostAgent) -> None:
    host.start()
    wait_for(lambda: _up(host))  # the values a scrape would freeze on
    host.detach()  # SIGTERM: the agent leaves, its worker runs on
    assert _down(_textfile(host)), _textfile(host)
    host.start()  # the next agent adopts the worker and writes its values again
    wait_for(lambda: _up(host))
    stop = host.cli("stop", "--timeout", "20")
    assert stop.returncode == 0, stop.stderr
    assert host.proc is not None and host.proc.wait(timeout=20) == 0
    assert _down(_textfile(host)), _textfile(host)


def test_a_killed_agents_frozen_file_is_cleaned_by_the_next_even_if_it_fails(
    host: HostAgent,
) -> None:
    host.start()
    wait_for(lambda: _up(host))
    host.kill9()
    assert _up(host)  # frozen: nobody runs, the file still says up with its values
    (host.state_dir / "control.sock").unlink(missing_ok=True)
    (host.state_dir / "control.sock" / "in-the-way").mkdir(parents=True)
    failed = subprocess.run(
        [*AGENT, "run", "--config", str(host.config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=host.env,
    )
    assert failed.returncode == 1 and "control.sock" in failed.stderr, failed.stderr
    assert _down(_textfile(host)), _textfile(host)
    (host.state_dir / "control.sock" / "in-the-way").rmdir()
    (host.state_dir / "control.sock").rmdir()
    host.start()  # and the one after works as ever
    wait_for(lambda: _up(host))


def test_an_agent_refused_for_a_live_one_leaves_its_textfile_alone(host: HostAgent) -> None:
    host.start()
    wait_for(lambda: _up(host))
    before = _textfile(host)
    second = subprocess.run(
        [*AGENT, "run", "--config", str(host.config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=host.env,
    )
    assert second.returncode == 1 and "another xce-agent" in second.stderr, second.stderr
    assert _textfile(host) == before and _up(host)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def test_an_agent_refused_for_one_recorded_live_leaves_its_textfile_alone(
    host: HostAgent,
) -> None:
    # The lock is free but the state names an agent that still counts as running (here: a
    # killed one not yet reaped): the refused agent cannot tell its file is stale.
    host.start()
    wait_for(lambda: _up(host))
    before = _textfile(host)
    assert host.proc is not None
    first = host.proc
    first.kill()
    wait_for(lambda: _zombie(first.pid))
    try:
        second = subprocess.run(
            [*AGENT, "run", "--config", str(host.config)],
            capture_output=True,
            text=True,
            timeout=60,
            env=host.env,
        )
        assert second.returncode == 1 and "recorded in its state" in second.stderr, second
        assert _textfile(host) == before
    finally:
        first.wait()
    host.start()  # reaped: the next agent takes over and writes its own values
    wait_for(lambda: _up(host))
