"""`xce-controller serve --tls-cert --tls-key`: a real agent joins over https trusting only its
ca_file, a renewed certificate is taken on SIGHUP, client certificates can be required, and a
bad pair stops the start with one line and exit 78."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.certs import Authority, Pair
from tests.integration.agents import AgentProcess
from tests.integration.controller_proc import ControllerProcess
from tests.integration.helpers import wait_for

CLUSTER = """\
version: 1
heartbeat_interval: 0.5s
host_loss_grace: 5s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
templates:
  default: {slots: 1}
"""


def tls_args(pair: Pair, *more: str) -> tuple[str, ...]:
    return ("--tls-cert", str(pair.cert), "--tls-key", str(pair.key), *more)


def served_certificate(port: int, ca: Path) -> str:
    """The subject CN of the certificate a new handshake gets."""
    context = ssl.create_default_context(cafile=str(ca))
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        cert: dict[str, Any] = tls.getpeercert() or {}
    names = {key: value for part in cert["subject"] for key, value in part}
    return str(names["commonName"])


def runs_a_job(ctl: ControllerProcess, host: str) -> None:
    """A job submitted for `host` is run by its worker, which talks to the controller itself."""
    options: dict[str, Any] = {"headers": ctl.admin_headers(), "verify": ctl.verify}
    options["cert"] = ctl.client_cert
    job = {"command": ["true"], "host": host}
    submitted = requests.post(ctl.url + "/v1/jobs", json=job, timeout=5, **options).json()

    def state() -> str:
        jobs = requests.get(ctl.url + "/v1/jobs", timeout=5, **options).json()
        return str(next(j["state"] for j in jobs if j["id"] == submitted["id"]))

    wait_for(lambda: state() == "done", 30)


def contact(agent: AgentProcess) -> dict[str, str]:
    return dict(agent.state().get("controller", {}))


def test_an_agent_joins_over_https_once_its_ca_file_trusts_the_controller(tmp_path: Path) -> None:
    ca = Authority(tmp_path / "ca")
    ctl = ControllerProcess(
        tmp_path, CLUSTER, args=tls_args(ca.issue("ctl")), ca_file=ca.cert
    ).start()
    try:
        assert ctl.url.startswith("https://")
        assert "listening on https://127.0.0.1:" in (tmp_path / "controller.log").read_text()
        with pytest.raises(requests.ConnectionError):  # no plain HTTP on the same port
            requests.get(f"http://127.0.0.1:{ctl.port}/v1/info", timeout=5)
        # Without the CA the agent reaches the controller and refuses its certificate.
        agent = AgentProcess(tmp_path, ctl.url, "i-1", "node1", token=ctl.join_token()).start()
        try:
            wait_for(lambda: "TLS failure" in contact(agent).get("detail", ""), 30)
            assert "(certificate)" in contact(agent)["detail"]
            assert (
                requests.get(
                    ctl.url + "/v1/hosts", headers=ctl.admin_headers(), verify=ctl.verify, timeout=5
                ).json()
                == []
            )
        finally:
            agent.stop()
        agent = AgentProcess(
            tmp_path, ctl.url, "i-1", "node1", token=ctl.join_token(), ca_file=str(ca.cert)
        ).start()
        try:
            wait_for(agent.worker_pid, 30)
            host = requests.get(
                ctl.url + "/v1/hosts/node1",
                headers=ctl.admin_headers(),
                verify=ctl.verify,
                timeout=5,
            ).json()
            assert host["state"] == "open" and host["instance_id"] == "i-1"
            assert contact(agent)["state"] == "connected"
            # The worker trusts the controller too (XCE_CONTROLLER_CA_FILE): it runs a job.
            runs_a_job(ctl, "node1")
            # xcecli trusts the CA through the requests library's REQUESTS_CA_BUNDLE.
            env = {**os.environ, "REQUESTS_CA_BUNDLE": str(ca.cert)}
            token = f"{ctl.db}.admin-token"
            cli = [sys.executable, "-m", "xce_controller.cli.xcecli", "--url", ctl.url]
            listed = subprocess.run(
                [*cli, "--token-file", token, "hosts"], env=env, capture_output=True, text=True
            )
            assert listed.returncode == 0 and "node1" in listed.stdout, listed.stderr
            env.pop("REQUESTS_CA_BUNDLE")
            untrusted = subprocess.run(
                [*cli, "--token-file", token, "hosts"], env=env, capture_output=True, text=True
            )
            assert untrusted.returncode == 3, untrusted.stderr
        finally:
            agent.stop()
    finally:
        ctl.stop()


def test_sighup_serves_a_renewed_certificate_to_new_connections(tmp_path: Path) -> None:
    ca = Authority(tmp_path / "ca")
    live = Pair(tmp_path / "live.pem", tmp_path / "live.key")
    first, renewed, wrong = ca.issue("first"), ca.issue("renewed"), ca.issue("wrong")
    shutil.copy(first.cert, live.cert)
    shutil.copy(first.key, live.key)
    ctl = ControllerProcess(tmp_path, CLUSTER, args=tls_args(live), ca_file=ca.cert).start()
    assert ctl.proc is not None
    try:
        assert served_certificate(ctl.port, ca.cert) == "first"
        # A pair that does not match is logged and the running certificate kept.
        shutil.copy(wrong.key, live.key)
        ctl.proc.send_signal(signal.SIGHUP)
        log = tmp_path / "controller.log"
        wait_for(lambda: "certificate not reloaded" in log.read_text())
        assert served_certificate(ctl.port, ca.cert) == "first"
        shutil.copy(renewed.cert, live.cert)
        shutil.copy(renewed.key, live.key)
        ctl.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: served_certificate(ctl.port, ca.cert) == "renewed")
        assert requests.get(ctl.url + "/v1/info", verify=ctl.verify, timeout=5).ok
    finally:
        ctl.stop()


def test_a_client_ca_makes_every_client_show_a_certificate_it_signed(tmp_path: Path) -> None:
    ca, other = Authority(tmp_path / "ca"), Authority(tmp_path / "other", "other-ca")
    args = tls_args(ca.issue("ctl"), "--tls-client-ca", str(ca.cert))
    ctl = ControllerProcess(tmp_path, CLUSTER, args=args, ca_file=ca.cert)
    client, stranger = ca.issue("client"), other.issue("stranger")
    ctl.client_cert = (str(client.cert), str(client.key))
    try:
        ctl.start()
        url, verify = ctl.url + "/v1/info", str(ca.cert)
        for cert in (None, (str(stranger.cert), str(stranger.key))):
            with pytest.raises(requests.ConnectionError):  # TLS 1.3: closed after the handshake
                requests.get(url, verify=verify, cert=cert, timeout=5)
        answer = requests.get(
            url, verify=verify, cert=(str(client.cert), str(client.key)), timeout=5
        )
        assert answer.status_code == 200 and "protocol" in answer.json()
        # An agent with the CA but no certificate is turned away; with one, it joins.
        agent = AgentProcess(
            tmp_path, ctl.url, "i-1", "node1", token=ctl.join_token(), ca_file=str(ca.cert)
        ).start()
        try:
            # TLS 1.3: the controller checks the certificate after the handshake, and closes.
            refused = ("RemoteDisconnected", "TLS failure")
            wait_for(lambda: any(w in contact(agent).get("detail", "") for w in refused), 30)
            assert agent.worker_pid() is None and contact(agent)["state"] == "unreachable"
        finally:
            agent.stop()
        mine = ca.issue("node1")
        pair = f"client_cert_file: '{mine.cert}', client_key_file: '{mine.key}', "
        agent = AgentProcess(
            tmp_path, ctl.url, "i-1", "node1", token=ctl.join_token(), ca_file=str(ca.cert)
        )
        agent.config.write_text(
            agent.config.read_text().replace("controller: {", "controller: {" + pair)
        )
        agent.start()
        try:
            wait_for(agent.worker_pid, 30)
            assert contact(agent)["state"] == "connected"
            # Its worker shows the same certificate (XCE_CONTROLLER_CLIENT_CERT_FILE, _KEY_FILE).
            runs_a_job(ctl, "node1")
        finally:
            agent.stop()
    finally:
        ctl.stop()


def serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "xce_controller", "serve", "--db", str(tmp_path / "db")]
    return subprocess.run(
        [*command, "--listen", "127.0.0.1:0", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "case, expected",
    [
        ("cert-only", "--tls-cert: expected --tls-key with it, got none"),
        ("key-only", "--tls-key: expected --tls-cert with it, got none"),
        ("client-ca-alone", "expected --tls-cert and --tls-key with it"),
        ("missing-key", "missing.key: expected a readable PEM file, got none"),
        ("key-of-another-cert", "cannot load them (key values mismatch)"),
        ("cert-is-not-pem", "cannot load them ("),
        ("client-ca-not-pem", "cannot load it ("),
    ],
)
def test_a_bad_tls_option_stops_the_start_with_one_line_and_exit_78(
    tmp_path: Path, case: str, expected: str
) -> None:
    ca = Authority(tmp_path / "ca")
    a, b = ca.issue("a"), ca.issue("b")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    args = {
        "cert-only": ("--tls-cert", str(a.cert)),
        "key-only": ("--tls-key", str(a.key)),
        "client-ca-alone": ("--tls-client-ca", str(ca.cert)),
        "missing-key": ("--tls-cert", str(a.cert), "--tls-key", str(tmp_path / "missing.key")),
        "key-of-another-cert": tls_args(Pair(a.cert, b.key)),
        "cert-is-not-pem": tls_args(Pair(junk, a.key)),
        "client-ca-not-pem": tls_args(a, "--tls-client-ca", str(junk)),
    }[case]
    done = serve(tmp_path, *args)
    assert done.returncode == 78, done.stderr
    assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def _xcecli(
    url: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "xce_controller.cli.xcecli", "--url", url, *args]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("XCE_", "REQUESTS_CA"))}
    return subprocess.run(
        command, env={**clean, **(env or {})}, capture_output=True, text=True, timeout=60
    )


def test_xcecli_trusts_a_private_ca_and_shows_a_client_certificate_by_its_options(
    tmp_path: Path,
) -> None:
    ca, other = Authority(tmp_path / "ca"), Authority(tmp_path / "other", "other-ca")
    args = tls_args(ca.issue("ctl"), "--tls-client-ca", str(ca.cert))
    ctl = ControllerProcess(tmp_path, CLUSTER, args=args, ca_file=ca.cert)
    mine, stranger = ca.issue("operator"), other.issue("stranger")
    ctl.client_cert = (str(mine.cert), str(mine.key))
    try:
        ctl.start()
        token = ("--token-file", f"{ctl.db}.admin-token")
        pair = ("--client-cert-file", str(mine.cert), "--client-key-file", str(mine.key))
        # Not trusted: the line names the missing option.
        untrusted = _xcecli(ctl.url, *token, "hosts")
        assert untrusted.returncode == 3
        assert untrusted.stderr.strip().endswith(
            "for a private CA, --ca-file or $XCE_CONTROLLER_CA_FILE"
        ), untrusted.stderr
        # Trusted but without a certificate: the controller closes after the handshake.
        closed = _xcecli(ctl.url, *token, "--ca-file", str(ca.cert), "hosts")
        assert closed.returncode == 3
        assert "(--client-cert-file, --client-key-file)" in closed.stderr, closed.stderr
        plain = _xcecli(ctl.url.replace("https://", "http://"), *token, "hosts")
        assert plain.returncode == 3
        assert plain.stderr.strip().endswith(": is it HTTPS there (https://)?"), plain.stderr
        ok = _xcecli(ctl.url, *token, "--ca-file", str(ca.cert), *pair, "hosts")
        assert ok.returncode == 0 and ok.stdout.startswith("HOST"), ok.stderr
        # The same by environment variables, and REQUESTS_CA_BUNDLE does not override them.
        env = {
            "XCE_CONTROLLER_CA_FILE": str(ca.cert),
            "XCE_CLIENT_CERT_FILE": str(mine.cert),
            "XCE_CLIENT_KEY_FILE": str(mine.key),
            "REQUESTS_CA_BUNDLE": str(other.cert),
        }
        by_env = _xcecli(ctl.url, *token, "hosts", env=env)
        assert by_env.returncode == 0 and by_env.stdout.startswith("HOST"), by_env.stderr
        # A certificate another CA signed is refused by the controller.
        theirs = ("--client-cert-file", str(stranger.cert), "--client-key-file", str(stranger.key))
        refused = _xcecli(ctl.url, *token, "--ca-file", str(ca.cert), *theirs, "hosts")
        assert refused.returncode == 3, refused.stderr
    finally:
        ctl.stop()


@pytest.mark.parametrize(
    "case, expected",
    [
        ("ca-missing", "--ca-file {tmp}/missing.pem: cannot load it (No such file or directory)"),
        ("ca-not-pem", "--ca-file {tmp}/junk.pem: cannot load it ("),
        ("cert-alone", "--client-cert-file: expected --client-key-file with it, got none"),
        ("key-alone", "--client-key-file: expected --client-cert-file with it, got none"),
        ("key-of-another", "cannot load them (key values mismatch)"),
        ("key-encrypted", "--client-key-file {tmp}/locked.key: expected an unencrypted key"),
    ],
)
def test_a_bad_xcecli_tls_file_is_one_line_and_exit_2(
    tmp_path: Path, case: str, expected: str
) -> None:
    ca = Authority(tmp_path / "ca")
    a, b = ca.issue("a"), ca.issue("b")
    junk, locked = tmp_path / "junk.pem", tmp_path / "locked.key"
    junk.write_text("not a certificate\n")
    subprocess.run(
        [
            "openssl",
            "pkey",
            "-in",
            str(a.key),
            "-aes256",
            "-passout",
            "pass:x",
            "-out",
            str(locked),
        ],
        check=True,
        capture_output=True,
    )
    args = {
        "ca-missing": ("--ca-file", str(tmp_path / "missing.pem")),
        "ca-not-pem": ("--ca-file", str(junk)),
        "cert-alone": ("--client-cert-file", str(a.cert)),
        "key-alone": ("--client-key-file", str(a.key)),
        "key-of-another": ("--client-cert-file", str(a.cert), "--client-key-file", str(b.key)),
        "key-encrypted": ("--client-cert-file", str(a.cert), "--client-key-file", str(locked)),
    }[case]
    done = _xcecli("https://127.0.0.1:9", *args, "hosts")  # never reached: checked first
    assert done.returncode == 2, done.stderr
    line = expected.format(tmp=tmp_path)
    assert done.stderr.strip() == f"xcecli: {line}" or (
        line in done.stderr and len(done.stderr.strip().splitlines()) == 1
    ), done.stderr
