"""The Redfish driver against sushy-tools' emulator over TLS with basic auth: credentials from
files, the CA file, and every failure mapped to its reason code."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.redfish_emulator import (
    Emulator,
    emulator_command,
    make_ca_and_cert,
    users_file,
)
from xce_protocol.reasons import Reason
from xce_provisioner.drivers.base import DriverError, Power, Request
from xce_provisioner.drivers.redfish import RedfishDriver, RedfishSettings

pytestmark = pytest.mark.skipif(
    emulator_command() is None, reason="sushy-tools (sushy-emulator) is not installed"
)


@pytest.fixture
def bmc(tmp_path: Path) -> Iterator[Emulator]:
    tls = make_ca_and_cert(tmp_path)
    if tls is None:
        pytest.skip("openssl is not installed")
    emulator = Emulator(tmp_path, ["node1"], tls=tls, users=users_file(tmp_path, "ops", "s3cret"))
    yield emulator.start()
    emulator.stop()


def settings(bmc: Emulator, password: str = "s3cret", **kw: object) -> RedfishSettings:  # noqa: S107
    where = bmc.workdir
    (where / "user").write_text("ops\n")
    (where / "password").write_text(password + "\n")
    base: dict[str, object] = {
        "url": bmc.url,
        "username_file": where / "user",
        "password_file": where / "password",
        "ca_file": where / "ca.pem",
        "timeout": 3.0,
        "read_retries": 0,
    }
    base.update(kw)
    return RedfishSettings(**base)  # type: ignore[arg-type]


def code_of(driver: RedfishDriver, system: str) -> Reason:
    with pytest.raises(DriverError) as failed:
        driver.power(system)
    return failed.value.code


def test_tls_with_the_ca_file_and_credentials_from_files_reads_and_powers(bmc: Emulator) -> None:
    for auth in ("session", "basic"):
        driver = RedfishDriver(settings(bmc, auth=auth))
        assert driver.power(bmc.system("node1")) in (Power.OFF, Power.ON)
        driver.close()
    driver = RedfishDriver(settings(bmc))
    driver.request(bmc.system("node1"), Request.ON)
    assert bmc.resets("node1") == 1
    driver.close()


def test_each_failure_has_its_reason_code(bmc: Emulator, tmp_path: Path) -> None:
    system = bmc.system("node1")
    assert code_of(RedfishDriver(settings(bmc, password="wrong")), system) is Reason.BMC_AUTH_FAILED
    no_ca = RedfishDriver(settings(bmc, ca_file=None))  # the system store knows no test CA
    assert code_of(no_ca, system) is Reason.BMC_TLS_FAILED
    missing = settings(bmc, password_file=tmp_path / "nope")
    assert code_of(RedfishDriver(missing), system) is Reason.BMC_AUTH_FAILED
    good = RedfishDriver(settings(bmc))
    assert code_of(good, "/redfish/v1/Systems/not-there") is Reason.BMC_NOT_FOUND
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"https://127.0.0.1:{s.getsockname()[1]}"
    assert code_of(RedfishDriver(settings(bmc, url=closed)), system) is Reason.BMC_UNREACHABLE
    assert good.power(system) in (Power.OFF, Power.ON), "a failure elsewhere changes nothing"
