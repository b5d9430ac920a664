"""A real `xce-agent run` with components given as Python scripts, for supervision tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.integration.helpers import alive, wait_for

AGENT = [sys.executable, "-m", "xce_agent"]


class HostAgent:
    """One agent without a controller; `components` maps a name to (script, extra YAML)."""

    def __init__(self, tmp: Path, env: dict[str, str] | None = None) -> None:
        self.tmp = tmp
        self.config = tmp / "agent.yaml"
        self.state_dir = tmp / "state"
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.strays: list[int] = []

    def write(self, components: dict[str, tuple[str, str]]) -> None:
        lines = ["version: 1", "instance: {id: i-test}", "roles:", "  provisioner:"]
        lines.append("    components:")
        for name, (script, extra) in components.items():
            path = self.tmp / f"{name}.py"
            path.write_text(script)
            lines.append(f"      {name}:")
            lines.append(f"        command: [{sys.executable}, {path}]")
            lines.extend(f"        {line}" for line in extra.splitlines() if line)
        lines.append(f"state_directory: {self.state_dir}")
        self.config.write_text("\n".join(lines) + "\n")

    def start(self) -> HostAgent:
        with open(self.tmp / "agent.log", "ab") as log:
            self.proc = subprocess.Popen(
                [*AGENT, "run", "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        pid = self.proc.pid
        wait_for(lambda: self.state().get("agent", {}).get("pid") == pid, 20)
        return self

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*AGENT, *args, "--config", str(self.config)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
        )

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def detach(self) -> None:
        """SIGTERM: the agent exits, the components keep running."""
        self.signal(signal.SIGTERM)
        assert self.proc is not None
        assert self.proc.wait(timeout=20) == 0

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)

    def state(self) -> dict[str, Any]:
        try:
            data = json.loads((self.state_dir / "state.json").read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def component(self, name: str) -> dict[str, Any]:
        for comp in self.state().get("components", []):
            if comp.get("name") == name:
                return dict(comp)
        return {}

    def running_pid(self, name: str) -> int | None:
        comp = self.component(name)
        return int(comp["pid"]) if comp.get("phase") == "running" and comp.get("pid") else None

    def log(self) -> str:
        try:
            return (self.tmp / "agent.log").read_text()
        except OSError:
            return ""

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGUSR2)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.cli("stop", "--timeout", "20")
        for pid in self.strays:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def wait_alive(pid_file: Path, timeout: float = 10) -> int:
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout)
    pid = int(pid_file.read_text().strip())
    assert alive(pid)
    return pid
