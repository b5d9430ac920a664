"""Run real `xce-agent` processes against a controller in tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

SAMPLE_WORKER = [sys.executable, "-m", "xce_agent", "sample-worker"]


class AgentProcess:
    def __init__(
        self,
        workdir: Path,
        url: str | list[str],
        instance: str,
        host: str,
        worker: list[str] | None = None,
        extra: str = "",
        token: str = "",
        ca_file: str = "",
        worker_user: str = "",
    ) -> None:
        self.dir = workdir / host
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = self.dir / "agent.yaml"
        command = json.dumps(worker or SAMPLE_WORKER)
        token_line = f", token: {token}" if token else ""
        token_line += f", ca_file: '{ca_file}'" if ca_file else ""
        self.config.write_text(
            f"version: 1\ncontroller: {{url: {json.dumps(url)}, timeout: 2s, "
            f"max_retry_delay: 1s{token_line}}}\n"
            f"instance: {{id: {instance}, host_name: {host}}}\n"
            "roles:\n  worker:\n    components:\n      worker:\n"
            f"        command: {command}\n        stop_timeout: 5s\n"
            + (f"        user: {worker_user}\n" if worker_user else "")
            + "        decommission_exit_codes: [100]\n"
            "        restart: {initial_delay: 0, delay: 0.2s, max_delay: 1s}\n"
            f"state_directory: '{self.dir / 'state'}'\n{extra}"
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] | None = None  # another tree's code (test_version_skew)

    def start(self) -> AgentProcess:
        with open(self.dir / "agent.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "xce_agent", "run", "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.dir if self.env is not None else None,  # else `-m` finds this tree
            )
        return self

    def restart(self) -> None:
        self.term()
        self.start()

    def term(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=15)

    def stop(self) -> None:
        """Stop components and the agent; kill whatever is left."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR2)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        pid = self.worker().get("pid")
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)

    def state(self) -> dict[str, Any]:
        try:
            data = json.loads((self.dir / "state" / "state.json").read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def worker(self) -> dict[str, Any]:
        comps = self.state().get("components") or [{}]
        result: dict[str, Any] = comps[0]
        return result

    def worker_pid(self) -> int | None:
        w = self.worker()
        return int(w["pid"]) if w.get("phase") == "running" and w.get("pid") else None

    def log(self) -> str:
        try:
            return (self.dir / "agent.log").read_text()
        except OSError:
            return ""
