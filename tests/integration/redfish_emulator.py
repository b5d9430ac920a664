"""sushy-tools' Redfish emulator as a real process on loopback, with its fake driver.

The fake driver keeps each system's power in a state directory and applies a power change
1 to 11 s after it was asked for (at random), as a slow BMC does. The emulator logs each
request it serves, so a test counts the resets it received (`resets`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import requests

RESET = "/Actions/ComputerSystem.Reset"


# The fake driver waits random.randint(1, 11) seconds before it applies a power change; a
# test that needs the change still pending a while (a takeover mid-action) fixes the delay.
FIXED_DELAY = """
import random, sys
from sushy_tools.emulator import main
from sushy_tools.emulator.resources.systems import fakedriver
delay = int(sys.argv.pop(1))
fakedriver.random = random.Random()
fakedriver.random.randint = lambda low, high: delay
sys.exit(main.main())
"""


def emulator_command() -> list[str] | None:
    """How to start the emulator here, or None (sushy-tools is not installed)."""
    found = shutil.which("sushy-emulator", path=str(Path(sys.executable).parent))
    return [found] if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Emulator:
    def __init__(
        self,
        workdir: Path,
        systems: list[str],
        delay: int | None = None,
        tls: tuple[Path, Path] | None = None,
        users: Path | None = None,
    ) -> None:
        self.workdir = workdir
        self.delay = delay  # seconds before a power change applies; None: 1 to 11 at random
        self.ids = {name: str(uuid.uuid5(uuid.NAMESPACE_DNS, name)) for name in systems}
        self.port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.verify: bool | str = str(tls[0].parent / "ca.pem") if tls else True
        self.log = workdir / "emulator.log"
        self.proc: subprocess.Popen[bytes] | None = None
        fake = [
            {"uuid": u, "name": n, "power_state": "Off", "nics": [{"mac": "00:00:5e:00:53:01"}]}
            for n, u in self.ids.items()
        ]
        (workdir / "emulator.conf").write_text(
            f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
            f"SUSHY_EMULATOR_LISTEN_PORT = {self.port}\n"
            "SUSHY_EMULATOR_FAKE_DRIVER = True\n"
            f"SUSHY_EMULATOR_STATE_DIR = {str(workdir / 'emulator-state')!r}\n"
            f"SUSHY_EMULATOR_FAKE_SYSTEMS = {fake!r}\n"
            + (f"SUSHY_EMULATOR_SSL_CERT = {str(tls[0])!r}\n" if tls else "")
            + (f"SUSHY_EMULATOR_SSL_KEY = {str(tls[1])!r}\n" if tls else "")
            + (f"SUSHY_EMULATOR_AUTH_FILE = {str(users)!r}\n" if users else "")
        )
        self.auth: tuple[str, str] | None = None

    def system(self, name: str) -> str:
        return f"/redfish/v1/Systems/{self.ids[name]}"

    def start(self) -> Emulator:
        command = emulator_command()
        assert command is not None
        if self.delay is not None:
            command = [sys.executable, "-c", FIXED_DELAY, str(self.delay)]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*command, "--config", str(self.workdir / "emulator.conf")],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                requests.get(self.url + "/redfish/v1/", timeout=1, verify=self.verify)
                return self
            except requests.RequestException:
                if self.proc.poll() is not None:
                    raise RuntimeError(self.log.read_text()) from None
                time.sleep(0.1)
        raise RuntimeError("the Redfish emulator did not start")

    def power(self, name: str) -> str:
        answer = requests.get(self.url + self.system(name), timeout=5)
        return str(answer.json()["PowerState"])

    def set_power(self, name: str, state: str) -> None:
        """Ask the emulator directly (the operator at the BMC), then wait until it shows."""
        body = {"ResetType": state}
        requests.post(self.url + self.system(name) + RESET, json=body, timeout=5)

    def resets(self, name: str) -> int:
        """The reset requests the emulator served for this system."""
        wanted = f"POST {self.system(name)}{RESET}"
        return sum(wanted in line for line in self.log.read_text().splitlines())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def make_ca_and_cert(where: Path) -> tuple[Path, Path] | None:
    """A CA (ca.pem) and a certificate for 127.0.0.1 it signed, with openssl; None without."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=where, check=True, capture_output=True)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    )
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "bmc.key",
        "-out",
        "bmc.csr",
    )
    (where / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run(
        "x509",
        "-req",
        "-in",
        "bmc.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "bmc.pem",
    )
    return where / "bmc.pem", where / "bmc.key"


def users_file(where: Path, user: str, password: str) -> Path:
    """The emulator's htpasswd file (bcrypt), with one user."""
    import bcrypt

    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    path = where / "users.htpasswd"
    path.write_text(f"{user}:{digest}\n")
    return path
