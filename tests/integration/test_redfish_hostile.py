"""The Redfish driver against a BMC that answers badly: server errors, garbage, silence. Each
is one DriverError with its reason code, and the driver works again once the BMC does."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("sushy")

from xce_protocol.reasons import Reason
from xce_provisioner.drivers.base import DriverError, Power, Request
from xce_provisioner.drivers.redfish import RedfishDriver, RedfishSettings

ROOT = {
    "@odata.id": "/redfish/v1/",
    "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot",
    "Id": "RootService",
    "Name": "Root",
    "RedfishVersion": "1.5.0",
    "Systems": {"@odata.id": "/redfish/v1/Systems"},
}
SYSTEM = {
    "@odata.id": "/redfish/v1/Systems/1",
    "@odata.type": "#ComputerSystem.v1_10_0.ComputerSystem",
    "Id": "1",
    "Name": "node1",
    "PowerState": "On",
    "Actions": {
        "#ComputerSystem.Reset": {
            "target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
            "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulShutdown"],
        }
    },
}


class Bmc:
    """What the BMC answers: `mode` is ok, error (500), garbage, slow, or refuse (400)."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.posts = 0
        bmc = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                # the driver gave up waiting (the slow mode), as it should
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body)

            def do_GET(self) -> None:
                if bmc.mode == "slow":
                    time.sleep(2)
                if bmc.mode == "error":
                    return self.answer(500, b'{"error": {"message": "internal"}}')
                if bmc.mode == "garbage":
                    return self.answer(200, b"\x00\xff not json {{{")
                doc = ROOT if self.path.rstrip("/") == "/redfish/v1" else SYSTEM
                return self.answer(200, json.dumps(doc).encode())

            def do_POST(self) -> None:
                bmc.posts += 1
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                if bmc.mode == "refuse":
                    return self.answer(400, b'{"error": {"message": "no"}}')
                self.answer(204, b"")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def bmc() -> Iterator[Bmc]:
    b = Bmc()
    yield b
    b.server.shutdown()
    b.server.server_close()


@pytest.mark.parametrize(
    ("mode", "code"),
    [
        ("error", Reason.BMC_FAILED),
        ("garbage", Reason.BMC_BAD_ANSWER),
        ("slow", Reason.BMC_TIMEOUT),
    ],
)
def test_a_bad_answer_is_a_driver_error_with_its_code(bmc: Bmc, mode: str, code: Reason) -> None:
    driver = RedfishDriver(RedfishSettings(bmc.url, timeout=0.5, read_retries=1))
    assert driver.power("/redfish/v1/Systems/1") is Power.ON  # it arrived, and works
    bmc.mode = mode
    started = time.monotonic()
    with pytest.raises(DriverError) as failed:
        driver.power("/redfish/v1/Systems/1")
    assert failed.value.code is code
    assert time.monotonic() - started < 6, "bounded: timeouts and retries"
    bmc.mode = "ok"
    assert driver.power("/redfish/v1/Systems/1") is Power.ON, "works again once the BMC does"


def test_a_refused_reset_is_sent_once_and_mapped(bmc: Bmc) -> None:
    driver = RedfishDriver(RedfishSettings(bmc.url, timeout=1, read_retries=2))
    bmc.mode = "refuse"
    with pytest.raises(DriverError) as failed:
        driver.request("/redfish/v1/Systems/1", Request.FORCE_OFF)
    assert failed.value.code is Reason.BMC_REFUSED
    assert bmc.posts == 1, "a reset is never resent"
