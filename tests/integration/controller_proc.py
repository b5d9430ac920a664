"""Start `xce-controller serve` as a real process on 127.0.0.1:0 for tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests


class ControllerProcess:
    def __init__(
        self,
        workdir: Path,
        config: str | None = None,
        db: str = "",
        args: tuple[str, ...] = (),
        ca_file: Path | None = None,
    ) -> None:
        """`db`: a `--db` value (tests' store_db fixture); the SQLite file in `workdir` else.
        `args` are added to serve's; with `ca_file` it is reached over https, trusting it."""
        self.workdir = workdir
        self.args = args
        self.verify: str | bool = str(ca_file) if ca_file else True
        self.scheme = "https" if ca_file else "http"
        self.client_cert: tuple[str, str] | None = None  # when it requires one
        self.db = workdir / "controller.db"
        self.store = db or str(self.db)  # what `--db` is given
        self.prefix: list[str] = []  # a command the controller runs under (faketime, say)
        self.config = workdir / "cluster.yaml"
        if config is not None:
            self.config.write_text(config)
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.port = 0  # kept across restarts, so agents find it again
        self.env: dict[str, str] | None = None  # another tree's code (tests/.../test_version_skew)
        self.cwd: Path | None = None

    def start(self) -> ControllerProcess:
        port_file = self.workdir / "port"
        port_file.unlink(missing_ok=True)
        args = [
            sys.executable,
            "-m",
            "xce_controller",
            "serve",
            "--db",
            self.store,
            "--listen",
            f"127.0.0.1:{self.port}",
            "--port-file",
            str(port_file),
            *self.args,
        ]
        if self.config.exists():
            args += ["--config", str(self.config)]
        with open(self.workdir / "controller.log", "ab") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                # Its own process group: a prefix that forks (faketime does) is stopped with
                # the controller it started, which otherwise outlived the test.
                start_new_session=True,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if port_file.exists() and port_file.read_text().strip():
                self.port = int(port_file.read_text().strip())
                self.url = f"{self.scheme}://127.0.0.1:{self.port}"
                try:
                    requests.get(
                        self.url + "/v1/info", timeout=1, verify=self.verify, cert=self.client_cert
                    )
                    return self
                except (requests.ConnectionError, requests.Timeout):
                    pass  # not listening yet, or slow on a loaded machine: asked again
            if self.proc.poll() is not None:
                raise RuntimeError((self.workdir / "controller.log").read_text())
            time.sleep(0.05)
        raise RuntimeError("controller did not start")

    def admin_headers(self) -> dict[str, str]:
        """The admin token `serve` generated (clusters that configure one pass it themselves)."""
        path = Path(f"{self.db}.admin-token")
        token = path.read_text().strip() if path.exists() else ""
        return {"Authorization": f"Bearer {token}"} if token else {}

    def join_token(self) -> str:
        """The cluster join token `serve` made for the run (clusters that configure one know it)."""
        path = Path(f"{self.db}.join-token")
        return path.read_text().strip() if path.exists() else ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):  # what the prefix left running
                os.killpg(self.proc.pid, signal.SIGKILL)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


def backup(source: ControllerProcess, standby: ControllerProcess) -> None:
    """Copy a serving controller's SQLite store into a standby's (`xce-controller backup`)."""
    copy = subprocess.run(
        [sys.executable, "-m", "xce_controller", "backup", "--db", str(source.db), str(standby.db)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert copy.returncode == 0, copy.stderr
