"""`xcecli` as an operator uses it against a real controller: the hosts table and its columns,
`--wait` on close and decommission with their exit codes, durations like the configs, named
connection errors, `--version`."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.controller_proc import ControllerProcess

CONFIG = """\
version: 1
heartbeat_interval: 1s
host_loss_grace: 60s
defaults: {join_deadline: 10m, drain_timeout: 5m, drain_policy: requeue}
auth: {admin_token: adm1n, join_token: j0in-t0ken}
templates:
  default: {slots: 2}
  gpu: {slots: 8}
"""
ADMIN = {"Authorization": "Bearer adm1n"}
CLI = [sys.executable, "-m", "xce_controller.cli.xcecli"]


@pytest.fixture
def ctl(tmp_path: Path) -> Iterator[ControllerProcess]:
    proc = ControllerProcess(tmp_path, CONFIG).start()
    yield proc
    proc.stop()


def xcecli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "xce_controller.cli.xcecli",
            "--url",
            url,
            "--token",
            "adm1n",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def popen(url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "xce_controller.cli.xcecli",
            "--url",
            url,
            "--token",
            "adm1n",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def join(ctl: ControllerProcess, name: str, instance: str, version: str = "9.8.7") -> str:
    body = {
        "host": name,
        "instance_id": instance,
        "provider": "aws",
        "resources": {"cpus": 48, "memory_bytes": 192 * 2**30},
        "agent_version": version,
    }
    r = requests.post(
        ctl.url + "/v1/join",
        json=body,
        headers={"Authorization": "Bearer j0in-t0ken"},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    return str(r.json()["credential"])


def running_job(ctl: ControllerProcess, name: str, credential: str) -> int:
    r = requests.post(
        ctl.url + "/v1/jobs",
        json={"command": ["sleep", "1"], "host": name},
        headers=ADMIN,
        timeout=10,
    )
    job = int(r.json()["id"])
    started = requests.post(
        ctl.url + f"/v1/hosts/{name}/jobs/{job}/started",
        json={},
        headers={"Authorization": f"Bearer {credential}"},
        timeout=10,
    )
    assert started.status_code == 200, started.text
    return job


def finish(ctl: ControllerProcess, name: str, credential: str, job: int) -> None:
    r = requests.post(
        ctl.url + f"/v1/hosts/{name}/jobs/{job}/finished",
        json={"exit_code": 0},
        headers={"Authorization": f"Bearer {credential}"},
        timeout=10,
    )
    assert r.status_code == 200, r.text


def test_hosts_shows_capacity_version_and_last_seen_and_wide_shows_more(
    ctl: ControllerProcess,
) -> None:
    requests.post(
        ctl.url + "/v1/expected",
        json={"instance_id": "i-g1", "template": "gpu", "expected_name": "g1", "provider": "aws"},
        headers=ADMIN,
        timeout=10,
    )
    credential = join(ctl, "g1", "i-g1")
    requests.post(
        ctl.url + "/v1/hosts/g1/heartbeat",
        json={"instance_id": "i-g1", "agent_version": "9.8.7"},
        headers={"Authorization": f"Bearer {credential}"},
        timeout=10,
    )
    table = xcecli(ctl.url, "hosts")
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == [
        "HOST",
        "STATE",
        "INSTANCE",
        "TEMPLATE",
        "SLOTS",
        "JOBS",
        "VERSION",
        "LAST",
        "SEEN",
        "DEADLINE",
        "NOTICE",
        "REASON",
    ]
    assert row.split()[:7] == ["g1", "open", "i-g1", "gpu", "8", "0", "9.8.7"]
    assert row.split()[7] != "-"  # last seen: the heartbeat's time of day
    wide = xcecli(ctl.url, "hosts", "-o", "wide").stdout.splitlines()
    assert {"PROVIDER", "CPUS", "MEMORY", "JOINED", "PROV"} <= set(wide[0].split())
    assert "aws" in wide[1].split() and "48" in wide[1].split() and "192Gi" in wide[1].split()
    for out in (table.stdout, "\n".join(wide)):
        assert all(line == line.rstrip() for line in out.splitlines()), "trailing spaces"
    as_json = xcecli(ctl.url, "hosts", "-o", "json").stdout
    assert '"agent_version": "9.8.7"' in as_json and '"slots": 8' in as_json
    detail = xcecli(ctl.url, "host", "g1").stdout
    assert "provisioned       yes (recorded by the provisioner before it joined)" in detail
    assert "agent_version     9.8.7" in detail and "memory            192Gi" in detail
    assert "True" not in detail


def test_decommission_wait_shows_the_drain_and_exits_0_once_decommissioned(
    ctl: ControllerProcess,
) -> None:
    credential = join(ctl, "n1", "i-1")
    job = running_job(ctl, "n1", credential)
    waiting = popen(ctl.url, "decommission", "n1", "--drain-timeout", "10m", "--wait")
    assert waiting.stdout is not None
    first = waiting.stdout.readline()
    assert first.startswith("n1: draining"), first
    progress = waiting.stdout.readline()
    countdown = r"n1: draining, 1 job left, policy requeue applies in (9m[0-5]\ds|10m00s)"
    assert re.fullmatch(countdown, progress.strip()), progress
    assert waiting.poll() is None  # still following the drain
    finish(ctl, "n1", credential, job)
    rest, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 0, err
    assert rest.splitlines()[-1].startswith("n1: decommissioned")


def test_close_wait_exits_1_when_the_host_is_opened_before_its_jobs_end(
    ctl: ControllerProcess,
) -> None:
    credential = join(ctl, "n2", "i-2")
    running_job(ctl, "n2", credential)
    waiting = popen(ctl.url, "close", "n2", "--reason", "disk check", "--wait")
    assert waiting.stdout is not None
    assert "n2: closed (disk check)" in waiting.stdout.readline()
    assert waiting.stdout.readline().startswith("n2: closed, 1 job left")
    assert xcecli(ctl.url, "open", "n2").returncode == 0
    _, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 1
    assert err.strip() == "xcecli: n2: open before its jobs ended (opened by admin)"
    idle = join(ctl, "n3", "i-3")
    assert idle
    done = xcecli(ctl.url, "close", "n3", "--wait")
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "n3: closed, no jobs left"


def test_duration_flags_take_durations_like_the_configs(ctl: ControllerProcess) -> None:
    running_job(ctl, "n4", join(ctl, "n4", "i-4"))  # a drain that lasts
    bad = xcecli(ctl.url, "decommission", "n4", "--drain-timeout", "10 minutes")
    assert bad.returncode == 2
    assert "--drain-timeout" in bad.stderr and "like 500ms, 30s, 10m, 1h" in bad.stderr
    assert requests.get(ctl.url + "/v1/hosts/n4", headers=ADMIN, timeout=10).json()["state"] == (
        "open"
    )
    ok = xcecli(ctl.url, "decommission", "n4", "--drain-timeout", "90m")
    assert ok.returncode == 0, ok.stderr
    drain = requests.get(ctl.url + "/v1/hosts/n4", headers=ADMIN, timeout=10).json()["drain"]
    assert drain["timeout"] == 5400
    expect = xcecli(ctl.url, "expect", "i-5", "--template", "default", "--deadline", "15m")
    assert expect.returncode == 0, expect.stderr


def test_an_unreachable_controller_is_named_refused_timed_out_or_tls(
    ctl: ControllerProcess,
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    refused = xcecli(f"http://127.0.0.1:{port}", "hosts")
    assert refused.returncode == 3
    assert (
        refused.stderr.strip()
        == f"xcecli: cannot reach http://127.0.0.1:{port}: connection refused"
    )
    tls = xcecli(ctl.url.replace("http://", "https://"), "hosts")
    assert tls.returncode == 3 and "TLS failed (" in tls.stderr, tls.stderr
    assert tls.stderr.strip().endswith(": is it plain HTTP there (http://)?"), tls.stderr
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        began = time.monotonic()
        slow = xcecli(url, "--timeout", "500ms", "hosts")
        assert time.monotonic() - began < 20
        began = time.monotonic()
        by_env = subprocess.run(
            [*CLI, "--url", url, "--token", "adm1n", "hosts"],
            env={**os.environ, "XCE_CONTROLLER_TIMEOUT": "500ms"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert time.monotonic() - began < 20 and by_env.stderr == slow.stderr
    assert slow.returncode == 3
    assert slow.stderr.strip() == f"xcecli: cannot reach {url}: timed out waiting for the answer"
    assert xcecli(ctl.url, "hosts").returncode == 0  # the controller still answers


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("xce_controller.cli.xcecli", "xcecli"),
        ("xce_controller", "xce-controller"),
        ("xce_agent", "xce-agent"),
        ("xce_provisioner", "xce-provisioner"),
    ],
)
def test_every_command_says_its_version(module: str, name: str) -> None:
    from xce_controller import __version__

    out = subprocess.run(
        [sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    assert out.stdout.strip() == f"{name}, version {__version__}"


def test_a_command_without_a_token_says_which_options_give_one(ctl: ControllerProcess) -> None:
    command = [sys.executable, "-m", "xce_controller.cli.xcecli", "--url", ctl.url, "hosts"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("XCE_")}
    bare = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert bare.returncode == 1
    assert bare.stderr.strip() == (
        "xcecli: 401: admin token missing or wrong "
        "(no token given: --token-file, $XCE_ADMIN_TOKEN_FILE or --token)"
    )
    mistaken = subprocess.run(
        [*command[:-1], "--token", "not-it", "hosts"], capture_output=True, text=True, env=env
    )
    assert mistaken.stderr.strip() == "xcecli: 401: admin token missing or wrong"


# xcecli as in a terminal, where Ctrl-C raises KeyboardInterrupt (a background job of a
# non-interactive shell, as tests may be run from, inherits SIGINT ignored).
INTERRUPTIBLE = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'xcecli'; runpy.run_module('xce_controller.cli.xcecli', run_name='__main__')"
)


WAIT = ("decommission", "n6", "--wait")


def test_ctrl_c_stops_the_wait_with_130_and_the_decommission_stands(
    ctl: ControllerProcess,
) -> None:
    running_job(ctl, "n6", join(ctl, "n6", "i-6"))
    waiting = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTIBLE, "--url", ctl.url, "--token", "adm1n", *WAIT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert waiting.stdout is not None
    assert waiting.stdout.readline().startswith("n6: draining")
    assert waiting.stdout.readline().startswith("n6: draining, 1 job left")  # following
    waiting.send_signal(signal.SIGINT)
    _, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 130
    assert err.strip() == "xcecli: n6: stopped waiting; the decommission stands"
    host = requests.get(ctl.url + "/v1/hosts/n6", headers=ADMIN, timeout=10).json()
    assert host["state"] == "draining"


LISTINGS = [("hosts",), ("host", "n7"), ("expected",), ("jobs",), ("templates",), ("leases",)]


@pytest.mark.parametrize("verb", [*LISTINGS, ("to-return",)])
def test_every_listing_takes_o_json_as_its_json_flag_says(
    ctl: ControllerProcess, verb: tuple[str, ...]
) -> None:
    join(ctl, "n7", "i-7")
    flag = xcecli(ctl.url, *verb, "--json")
    option = xcecli(ctl.url, *verb, "-o", "json")
    assert flag.returncode == option.returncode == 0, option.stderr
    assert json.loads(option.stdout) == json.loads(flag.stdout)
    table = xcecli(ctl.url, *verb, "-o", "table")
    assert table.returncode == 0 and not table.stdout.lstrip().startswith(("[", "{"))
