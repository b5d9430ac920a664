"""The Redfish driver attacked by a hostile BMC (tests/integration/fake_bmc.py on loopback):
redirects must not carry credentials anywhere, nor a reset to another place; a reset is sent
once whatever the BMC answers (a 401 after a session expired, iDRAC's "not ready yet"); an
answer dripped a byte at a time, headers included, costs about `timeout`; malformed documents
and TLS failures end as one DriverError with its code."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

pytest.importorskip("sushy")

from tests.integration.fake_bmc import (
    RESET_PATH,
    SYSTEM_PATH,
    FakeBmc,
    drip,
    endless_headers,
    serving,
    system,
)
from xce_protocol.reasons import Reason
from xce_provisioner.drivers.base import DriverError, Power, Request
from xce_provisioner.drivers.redfish import RedfishDriver, RedfishSettings

USER, PASSWORD = "ops", "s3cret"


def credentials(where: Path) -> tuple[Path, Path]:
    (where / "user").write_text(USER + "\n")
    (where / "password").write_text(PASSWORD + "\n")
    return where / "user", where / "password"


def driver_for(
    bmc: FakeBmc, where: Path, auth: str = "session", timeout: float = 2.0, read_retries: int = 2
) -> RedfishDriver:
    user, password = credentials(where)
    settings = RedfishSettings(
        bmc.url,
        username_file=user,
        password_file=password,
        auth=auth,
        timeout=timeout,
        read_retries=read_retries,
    )
    return RedfishDriver(settings, sleep=lambda s: None)


@pytest.fixture
def bmc() -> Iterator[FakeBmc]:
    with serving(FakeBmc(user=USER, password=PASSWORD)) as b:
        yield b


@pytest.fixture
def elsewhere() -> Iterator[FakeBmc]:
    """Another origin (another port): where a hostile BMC redirects to."""
    with serving(FakeBmc()) as b:
        yield b


def secrets_in(seen: FakeBmc) -> list[str]:
    found = []
    for s in seen.seen:
        for name, value in s.headers.items():
            if name.lower() in ("x-auth-token", "authorization") or PASSWORD in value:
                found.append(f"{s.method} {s.path} {name}")
    return found


def redirect(to: str, status: int = 302) -> tuple[int, bytes, dict[str, str]]:
    return (status, b"", {"Location": to})


# --- redirects -------------------------------------------------------------------------


@pytest.mark.parametrize("auth", ["session", "basic"])
@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_of_a_read_is_refused_and_carries_no_credentials(
    bmc: FakeBmc, elsewhere: FakeBmc, tmp_path: Path, auth: str, status: int
) -> None:
    driver = driver_for(bmc, tmp_path, auth=auth)
    assert driver.power(SYSTEM_PATH) is Power.ON  # the session (or basic auth) works
    bmc.always("GET", SYSTEM_PATH, redirect(elsewhere.url + SYSTEM_PATH, status))
    with pytest.raises(DriverError) as failed:
        driver.power(SYSTEM_PATH)
    assert any(s.path == SYSTEM_PATH for s in bmc.seen[-2:]), "the redirect was answered"
    assert failed.value.code is Reason.BMC_REFUSED
    assert "redirect" in failed.value.message
    assert not elsewhere.seen, "a redirect is never followed"
    assert not secrets_in(elsewhere)
    bmc.lasting.clear()
    assert driver.power(SYSTEM_PATH) is Power.ON, "works again once the BMC does"


@pytest.mark.parametrize("status", [302, 303, 307, 308])
def test_a_redirected_reset_goes_nowhere_else(
    bmc: FakeBmc, elsewhere: FakeBmc, tmp_path: Path, status: int
) -> None:
    driver = driver_for(bmc, tmp_path)
    bmc.once("POST", RESET_PATH, redirect(elsewhere.url + RESET_PATH, status))
    with pytest.raises(DriverError) as failed:
        driver.request(SYSTEM_PATH, Request.FORCE_OFF)
    assert len(bmc.resets()) == 1, "the reset arrived once"
    assert failed.value.code is Reason.BMC_REFUSED
    assert not elsewhere.seen, "not sent to another origin, nor its token"


def test_a_redirect_to_the_same_origin_is_refused_too(bmc: FakeBmc, tmp_path: Path) -> None:
    """A BMC has no business redirecting a Redfish client; the same host is no exception (a
    POST turned into a GET by a 302 would be a reset reported as accepted)."""
    driver = driver_for(bmc, tmp_path)
    bmc.once("POST", RESET_PATH, redirect(SYSTEM_PATH, 302))
    with pytest.raises(DriverError) as failed:
        driver.request(SYSTEM_PATH, Request.ON)
    assert failed.value.code is Reason.BMC_REFUSED
    assert len(bmc.resets()) == 1


# --- a reset is sent once ----------------------------------------------------------------


def expired_then_401(bmc: FakeBmc) -> object:
    """The session expired just as the reset arrived (the BMC may even have acted)."""

    def write(handler: BaseHTTPRequestHandler) -> None:
        bmc.expire_sessions()
        handler.answer(401, {"error": {"message": "session expired"}})  # type: ignore[attr-defined]

    return write


def test_a_401_on_a_reset_after_the_session_expired_is_not_resent(
    bmc: FakeBmc, tmp_path: Path
) -> None:
    driver = driver_for(bmc, tmp_path)
    assert driver.power(SYSTEM_PATH) is Power.ON
    bmc.once("POST", RESET_PATH, expired_then_401(bmc))
    with pytest.raises(DriverError) as failed:
        driver.request(SYSTEM_PATH, Request.FORCE_OFF)
    assert failed.value.code is Reason.BMC_AUTH_FAILED
    assert len(bmc.resets()) == 1, "sushy re-authenticated and sent the reset again"
    assert driver.power(SYSTEM_PATH) is Power.ON, "a new session next time"


def test_a_session_expired_before_a_reset_costs_a_read_not_a_reset(
    bmc: FakeBmc, tmp_path: Path
) -> None:
    driver = driver_for(bmc, tmp_path)
    assert driver.power(SYSTEM_PATH) is Power.ON
    bmc.expire_sessions()
    driver.request(SYSTEM_PATH, Request.FORCE_OFF)  # its read renews the session first
    assert len(bmc.resets()) == 1


@pytest.mark.parametrize("status", [400, 500])
@pytest.mark.parametrize(
    "message",
    ["SYS518: iDRAC is not ready", "iLO InvalidOperationForSystemState"],
)
def test_a_not_ready_answer_to_a_reset_is_not_retried(
    bmc: FakeBmc, tmp_path: Path, status: int, message: str
) -> None:
    """sushy retries a POST whose error reads like iDRAC's SYS518 or iLO's not-ready: the
    reset may have been queued by then."""
    driver = driver_for(bmc, tmp_path)
    answer = (status, {"error": {"message": message, "@Message.ExtendedInfo": []}})
    bmc.once("POST", RESET_PATH, answer)
    bmc.once("POST", RESET_PATH, answer)
    with pytest.raises(DriverError) as failed:
        driver.request(SYSTEM_PATH, Request.ON)
    assert failed.value.code is (Reason.BMC_FAILED if status == 500 else Reason.BMC_REFUSED)
    assert len(bmc.resets()) == 1, "a reset was sent again"


def test_a_reset_whose_answer_times_out_is_not_resent(bmc: FakeBmc, tmp_path: Path) -> None:
    driver = driver_for(bmc, tmp_path, timeout=0.5)

    def silent(handler: BaseHTTPRequestHandler) -> None:
        time.sleep(2)

    bmc.once("POST", RESET_PATH, silent)
    with pytest.raises(DriverError) as failed:
        driver.request(SYSTEM_PATH, Request.ON)
    assert failed.value.code is Reason.BMC_TIMEOUT
    assert len(bmc.resets()) == 1


# --- dripped answers ---------------------------------------------------------------------


def test_headers_dripped_a_byte_at_a_time_cost_about_the_timeout(
    bmc: FakeBmc, tmp_path: Path
) -> None:
    driver = driver_for(bmc, tmp_path, timeout=1.0)
    assert driver.power(SYSTEM_PATH) is Power.ON
    bmc.always("GET", SYSTEM_PATH, endless_headers(0.2))
    began = time.monotonic()
    with pytest.raises(DriverError) as failed:
        driver.power(SYSTEM_PATH)
    took = time.monotonic() - began
    assert any(s.path == SYSTEM_PATH for s in bmc.seen[-3:])
    assert failed.value.code is Reason.BMC_TIMEOUT
    assert took < 4.0, f"a read dripped headers for {took:.1f} s"
    bmc.lasting.clear()
    assert driver.power(SYSTEM_PATH) is Power.ON


def test_a_reset_answered_with_dripped_headers_is_cut_off_and_sent_once(
    bmc: FakeBmc, tmp_path: Path
) -> None:
    driver = driver_for(bmc, tmp_path, timeout=1.0)
    bmc.always("POST", RESET_PATH, endless_headers(0.2))
    began = time.monotonic()
    with pytest.raises(DriverError) as failed:
        driver.request(SYSTEM_PATH, Request.ON)
    assert failed.value.code is Reason.BMC_TIMEOUT
    assert time.monotonic() - began < 5.0  # its read of the system, then the reset
    assert len(bmc.resets()) == 1


def test_a_whole_answer_dripped_is_cut_off(bmc: FakeBmc, tmp_path: Path) -> None:
    import json

    body = json.dumps(system()).encode()
    raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    raw += f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    driver = driver_for(bmc, tmp_path, timeout=1.0, read_retries=2)
    assert driver.power(SYSTEM_PATH) is Power.ON
    bmc.always("GET", SYSTEM_PATH, drip(raw, 0.05))
    began = time.monotonic()
    with pytest.raises(DriverError) as failed:
        driver.power(SYSTEM_PATH)
    assert failed.value.code is Reason.BMC_TIMEOUT
    # three tries (read_retries 2), each cut at about 1 s
    assert time.monotonic() - began < 6.0


# --- malformed answers -------------------------------------------------------------------

MALFORMED_POWER: list[object] = [5, None, [], {"On": True}, "PoweringOn", "x" * 100000, True]


@pytest.mark.parametrize("value", MALFORMED_POWER, ids=[repr(v)[:12] for v in MALFORMED_POWER])
def test_an_odd_power_state_reads_unknown(bmc: FakeBmc, tmp_path: Path, value: object) -> None:
    driver = driver_for(bmc, tmp_path)
    bmc.power = value
    try:
        state = driver.power(SYSTEM_PATH)
    except DriverError as exc:
        assert exc.code is Reason.BMC_BAD_ANSWER
    else:
        assert state is Power.UNKNOWN
    assert any(s.path == SYSTEM_PATH for s in bmc.seen)


def raw_answer(raw: bytes) -> object:
    def write(handler: BaseHTTPRequestHandler) -> None:
        with contextlib.suppress(OSError):
            handler.wfile.write(raw)

    return write


MALFORMED_ANSWERS = {
    "a list": (200, b"[1, 2, 3]"),
    "a string": (200, b'"On"'),
    "not utf-8": (200, b'{"PowerState": "\xff\xfe"}'),
    "deeply nested": (200, b"[" * 100000 + b"]" * 100000),
    "empty": (200, b""),
    "html": (200, b"<html>login</html>"),
}


@pytest.mark.parametrize("name", list(MALFORMED_ANSWERS))
def test_a_malformed_system_document_is_bad_answer(bmc: FakeBmc, tmp_path: Path, name: str) -> None:
    driver = driver_for(bmc, tmp_path)
    bmc.always("GET", SYSTEM_PATH, MALFORMED_ANSWERS[name])
    with pytest.raises(DriverError) as failed:
        driver.power(SYSTEM_PATH)
    assert failed.value.code is Reason.BMC_BAD_ANSWER, failed.value.message
    bmc.lasting.clear()
    assert driver.power(SYSTEM_PATH) is Power.ON


BROKEN_HTTP = {
    "short body": b'HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n{"Id": ',
    "garbage status": b"HTTP/1.1 abc def\r\n\r\n",
    "not http": b"\x16\x03\x01\x02\x00hello",
    "header without end": b"HTTP/1.1 200 OK\r\nX: " + b"a" * 200000,
    "many headers": b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 500 + b"\r\n{}",
    "negative length": b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n{}",
}


@pytest.mark.parametrize("name", list(BROKEN_HTTP))
def test_broken_http_is_one_driver_error(bmc: FakeBmc, tmp_path: Path, name: str) -> None:
    driver = driver_for(bmc, tmp_path, timeout=1.0)
    assert driver.power(SYSTEM_PATH) is Power.ON
    bmc.always("GET", SYSTEM_PATH, raw_answer(BROKEN_HTTP[name]))
    with pytest.raises(DriverError) as failed:
        driver.power(SYSTEM_PATH)
    assert failed.value.code in (Reason.BMC_BAD_ANSWER, Reason.BMC_UNREACHABLE), (
        failed.value.code,
        failed.value.message,
    )
    bmc.lasting.clear()
    assert driver.power(SYSTEM_PATH) is Power.ON


def test_a_reset_action_missing_from_the_system_is_bad_answer(bmc: FakeBmc, tmp_path: Path) -> None:
    doc = system()
    del doc["Actions"]
    bmc.always("GET", SYSTEM_PATH, (200, doc))
    driver = driver_for(bmc, tmp_path)
    with pytest.raises(DriverError) as failed:
        driver.request(SYSTEM_PATH, Request.ON)
    assert failed.value.code is Reason.BMC_BAD_ANSWER
    assert not bmc.resets()


def test_a_reset_target_on_another_origin_is_not_followed(
    bmc: FakeBmc, elsewhere: FakeBmc, tmp_path: Path
) -> None:
    """The system document names where its reset goes: a BMC naming another host gets no
    reset sent there, nor its session token."""
    doc = system()
    doc["Actions"]["#ComputerSystem.Reset"]["target"] = elsewhere.url + RESET_PATH
    bmc.always("GET", SYSTEM_PATH, (200, doc))
    driver = driver_for(bmc, tmp_path)
    with pytest.raises(DriverError) as failed:
        driver.request(SYSTEM_PATH, Request.ON)
    assert failed.value.code is Reason.BMC_BAD_ANSWER
    assert not elsewhere.seen


# --- TLS ---------------------------------------------------------------------------------


def openssl(where: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=where, check=True, capture_output=True)


def certificates(where: Path) -> dict[str, tuple[Path, Path]]:
    """A CA, and certificates: good (127.0.0.1, signed by the CA), wrong_name (signed, for
    another name), expired (signed, for 127.0.0.1, ended in 2020), self_signed."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    key = ["-newkey", "rsa:2048", "-nodes"]
    openssl(where, "req", "-x509", *key, "-days", "2", "-subj", "/CN=test CA",
            "-keyout", "ca.key", "-out", "ca.pem")  # fmt: skip
    (where / "ip.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    (where / "name.ext").write_text("subjectAltName=DNS:bmc.example\n")
    (where / "index.txt").write_text("")
    (where / "serial").write_text("01\n")
    (where / "ca.cnf").write_text(
        "[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\n"
        "default_md = sha256\npolicy = p\nunique_subject = no\n[p]\ncommonName = supplied\n"
    )
    out: dict[str, tuple[Path, Path]] = {}
    for name, ext, dates in [
        ("good", "ip.ext", ["-days", "2"]),
        ("wrong_name", "name.ext", ["-days", "2"]),
        ("expired", "ip.ext", ["-startdate", "20200101000000Z", "-enddate", "20200102000000Z"]),
    ]:
        openssl(where, "req", *key, "-subj", "/CN=127.0.0.1", "-keyout", f"{name}.key",
                "-out", f"{name}.csr")  # fmt: skip
        openssl(where, "ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile",
                "ca.key", "-in", f"{name}.csr", "-out", f"{name}.pem", "-extfile", ext,
                *dates)  # fmt: skip
        out[name] = (where / f"{name}.pem", where / f"{name}.key")
    openssl(where, "req", "-x509", *key, "-days", "2", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", "self.key",
            "-out", "self.pem")  # fmt: skip
    out["self_signed"] = (where / "self.pem", where / "self.key")
    return out


@pytest.mark.parametrize("name", ["wrong_name", "expired", "self_signed", "wrong_ca"])
def test_a_certificate_that_does_not_verify_is_tls_failed(tmp_path: Path, name: str) -> None:
    certs = certificates(tmp_path)
    served = certs["good" if name == "wrong_ca" else name]
    other_ca = tmp_path / "other"
    other_ca.mkdir()
    openssl(other_ca, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=other CA", "-keyout", "ca.key", "-out", "ca.pem")  # fmt: skip
    ca = other_ca / "ca.pem" if name == "wrong_ca" else tmp_path / "ca.pem"
    with serving(FakeBmc(user=USER, password=PASSWORD), tls=served) as bmc:
        user, password = credentials(tmp_path)
        driver = RedfishDriver(
            RedfishSettings(bmc.url, user, password, ca_file=ca, timeout=2.0),
            sleep=lambda s: None,
        )
        began = time.monotonic()
        with pytest.raises(DriverError) as failed:
            driver.power(SYSTEM_PATH)
        assert failed.value.code is Reason.BMC_TLS_FAILED, failed.value.message
        assert time.monotonic() - began < 3.0, "a TLS failure is not retried"
        assert not bmc.seen, "no request (nor credentials) went over a connection not verified"
    # the same server with the good certificate works: the failure was the certificate
    with serving(FakeBmc(user=USER, password=PASSWORD), tls=certs["good"]) as bmc:
        driver = RedfishDriver(
            RedfishSettings(bmc.url, user, password, ca_file=tmp_path / "ca.pem", timeout=2.0)
        )
        assert driver.power(SYSTEM_PATH) is Power.ON


def test_a_tls_handshake_dripped_is_cut_off(tmp_path: Path) -> None:
    """A BMC that accepts the connection and sends its TLS handshake a byte a second."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.recv(4096)  # the ClientHello
                try:
                    for b in b"\x16\x03\x03\x00\x50" + b"\x02" * 0x50:  # a ServerHello, slowly
                        if stop.is_set():
                            return
                        conn.send(bytes([b]))
                        time.sleep(0.3)
                except OSError:
                    continue

    threading.Thread(target=serve, daemon=True).start()
    try:
        url = f"https://127.0.0.1:{listener.getsockname()[1]}"
        driver = RedfishDriver(RedfishSettings(url, timeout=1.0, read_retries=0))
        began = time.monotonic()
        with pytest.raises(DriverError) as failed:
            driver.power(SYSTEM_PATH)
        took = time.monotonic() - began
        assert failed.value.code in (Reason.BMC_TIMEOUT, Reason.BMC_TLS_FAILED)
        assert took < 4.0, f"a dripped handshake held a read for {took:.1f} s"
    finally:
        stop.set()
        listener.close()


# --- each BMC error has its code ---------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (401, Reason.BMC_AUTH_FAILED),
        (403, Reason.BMC_AUTH_FAILED),
        (404, Reason.BMC_NOT_FOUND),
        (405, Reason.BMC_REFUSED),
        (409, Reason.BMC_REFUSED),
        (429, Reason.BMC_REFUSED),
        (500, Reason.BMC_FAILED),
        (503, Reason.BMC_FAILED),
    ],
)
def test_each_error_status_of_a_reset_has_its_code_and_is_sent_once(
    bmc: FakeBmc, tmp_path: Path, status: int, code: Reason
) -> None:
    driver = driver_for(bmc, tmp_path)
    bmc.once("POST", RESET_PATH, (status, {"error": {"message": "no"}}))
    with pytest.raises(DriverError) as failed:
        driver.request(SYSTEM_PATH, Request.FORCE_OFF)
    assert failed.value.code is code
    assert len(bmc.resets()) == 1
    driver.request(SYSTEM_PATH, Request.FORCE_OFF)  # works again once the BMC does
    assert len(bmc.resets()) == 2


# --- the answer is the system asked for --------------------------------------------------


def test_a_reset_target_under_another_system_is_not_sent(bmc: FakeBmc, tmp_path: Path) -> None:
    doc = system()
    doc["Actions"]["#ComputerSystem.Reset"]["target"] = (
        "/redfish/v1/Systems/2/Actions/ComputerSystem.Reset"
    )
    bmc.always("GET", SYSTEM_PATH, (200, doc))
    driver = driver_for(bmc, tmp_path)
    with pytest.raises(DriverError) as failed:
        driver.request(SYSTEM_PATH, Request.FORCE_OFF)
    assert failed.value.code is Reason.BMC_BAD_ANSWER
    assert any(s.path == SYSTEM_PATH for s in bmc.seen), "the document was read"
    assert not [s for s in bmc.seen if s.method == "POST" and "Actions" in s.path]


def test_another_systems_document_is_bad_answer(bmc: FakeBmc, tmp_path: Path) -> None:
    doc = system("Off")
    doc["@odata.id"] = "/redfish/v1/Systems/2"
    bmc.always("GET", SYSTEM_PATH, (200, doc))
    driver = driver_for(bmc, tmp_path)
    with pytest.raises(DriverError) as failed:
        driver.power(SYSTEM_PATH)
    assert failed.value.code is Reason.BMC_BAD_ANSWER
    bmc.lasting.clear()
    assert driver.power(SYSTEM_PATH) is Power.ON


def test_the_environments_proxy_gets_no_bmc_credentials(
    bmc: FakeBmc, elsewhere: FakeBmc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP(S)_PROXY set for the host's way out must not carry a BMC's session or password."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, elsewhere.url)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    driver = driver_for(bmc, tmp_path)
    assert driver.power(SYSTEM_PATH) is Power.ON
    assert any(s.path == SYSTEM_PATH for s in bmc.seen)
    assert not elsewhere.seen
