"""A hostile Redfish endpoint on loopback: answers that drip or never end must cost a bounded
time and memory per call, and end as a `bmc_*` reason code, not a wedged provisioner pass."""

from __future__ import annotations

import http.server
import resource
import threading
import time
from collections.abc import Iterator
from typing import ClassVar

import pytest

from xce_protocol.reasons import Reason
from xce_provisioner.drivers.base import DriverError
from xce_provisioner.drivers.redfish import RedfishDriver, RedfishSettings

pytest.importorskip("sushy")


class Hostile(http.server.BaseHTTPRequestHandler):
    mode = "drip"
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.mode == "huge":
            size = 512 * 1024 * 1024
            self.send_header("Content-Length", str(size))
            self.end_headers()
            chunk = b" " * 65536
            try:
                for _ in range(size // len(chunk)):
                    self.wfile.write(chunk)
            except OSError:
                return
            return
        self.send_header("Content-Length", "100000")
        self.end_headers()
        try:
            for _ in range(100000):  # a byte every 0.2 s: each read is quick, the whole is not
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            return

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def bmc() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("mode", ["drip", "huge"])
def test_an_answer_that_drips_or_never_ends_is_cut_off(
    bmc: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Hostile, "mode", mode)
    Hostile.seen.clear()
    driver = RedfishDriver(RedfishSettings(url=bmc, timeout=1.0, read_retries=0))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    began = time.monotonic()
    with pytest.raises(DriverError) as caught:
        driver.power("/redfish/v1/Systems/1")
    took = time.monotonic() - began
    driver.close()
    assert Hostile.seen, "the request reached the hostile endpoint"
    assert caught.value.code in (Reason.BMC_TIMEOUT, Reason.BMC_BAD_ANSWER)
    assert took < 10.0, f"one call took {took:.1f} s"
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    assert grew < 100 * 1024, f"one answer grew the process by {grew} KiB"
