"""`xce-controller demo` (and `xce-agent demo`): the elastic-host story here, in about 15 s.

An embedded reference controller on a free loopback port, an agent in its own process running
the sample worker, jobs, a worker crash, a decommission with a drain, and the instance on the
to-return list. Every step is checked; the demo exits non-zero if one did not happen.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

INSTANCE = "i-0demo1"
HOST = "demo-node-1"


class DemoFailed(Exception):
    pass


class Demo:
    def __init__(self, out: Callable[[str], None]) -> None:
        self.out = out
        self.began = time.monotonic()
        self.tmp = Path(tempfile.mkdtemp(prefix="xce-demo-"))
        self.controller: Any = None
        self.agent: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.join_token = ""

    def say(self, text: str) -> None:
        self.out(f"[{time.monotonic() - self.began:5.1f}s] {text}")

    def wait(self, what: str, check: Callable[[], Any], timeout: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.05)
        raise DemoFailed(f"{what}: did not happen within {timeout:.0f}s")

    def api(self, method: str, path: str, **kw: Any) -> Any:
        headers = self.controller.admin_headers
        response = requests.request(method, self.url + path, timeout=10, headers=headers, **kw)
        if response.status_code >= 400:
            raise DemoFailed(f"{method} {path}: {response.status_code} {response.text[:200]}")
        return response.json()

    def state(self) -> dict[str, Any]:
        try:
            data = json.loads((self.tmp / "state" / "state.json").read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def worker(self) -> dict[str, Any]:
        comps = self.state().get("components", [])
        return comps[0] if comps else {}

    def host(self) -> dict[str, Any]:
        result: dict[str, Any] = self.api("GET", f"/v1/hosts/{HOST}")
        return result

    def job(self, job_id: int) -> dict[str, Any]:
        return next(j for j in self.api("GET", "/v1/jobs") if j["id"] == job_id)

    # --- the story ----------------------------------------------------------------------
    def run(self) -> None:
        self.start_controller()
        self.start_agent()
        self.run_a_job()
        self.crash_the_worker()
        self.decommission_while_a_job_runs()
        self.show_to_return()
        self.show_why()

    def start_controller(self) -> None:
        from xce_controller.core.config import load_cluster_config
        from xce_controller.http.server import EmbeddedController

        config = self.tmp / "cluster.yaml"
        config.write_text(
            "version: 1\nheartbeat_interval: 2s\nhost_loss_grace: 20s\n"
            "agent_max_restart_backoff: 5s\nrejoin_allowance: 5s\n"
            "templates:\n  default: {slots: 2}\n"
            "  demo-small: {type: X86_64, model: demo, slots: 2}\n"
        )
        self.controller = EmbeddedController(load_cluster_config(config), self.tmp / "ctl.db")
        self.controller.start()
        self.url = self.controller.url
        self.say(f"The reference controller is up at {self.url} with a temporary database.")
        recorded = self.api(
            "POST",
            "/v1/expected",
            json={
                "instance_id": INSTANCE,
                "template": "demo-small",
                "expected_name": HOST,
                "provider": "demo",
                "mint_join_token": True,
            },
        )
        self.join_token = recorded["join_token"]
        self.say(
            f"The provisioner recorded instance {INSTANCE}: template demo-small, expected "
            f"as {HOST}, with a single-use join token the controller minted for it. The "
            "controller now waits for it to join."
        )

    def start_agent(self) -> None:
        config = self.tmp / "agent.yaml"
        config.write_text(
            f"version: 1\ncontroller: {{url: '{self.url}', token: '{self.join_token}'}}\n"
            f"instance: {{id: {INSTANCE}, template: demo-small, host_name: {HOST}}}\n"
            "roles:\n  worker:\n    components:\n      xce-worker:\n"
            f"        command: ['{sys.executable}', -m, xce_agent, sample-worker]\n"
            "        stop_timeout: 5s\n        decommission_exit_codes: [100]\n"
            f"state_directory: '{self.tmp / 'state'}'\nlog_level: warning\n"
            f"metrics: {{textfile: '{self.tmp / 'xce-agent.prom'}'}}\n"
        )
        log = open(self.tmp / "agent.log", "wb")  # noqa: SIM115 - closed with the process
        self.agent = subprocess.Popen(
            [sys.executable, "-m", "xce_agent", "run", "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.say("Started xce-agent in its own process, as cloud-init would on the new host.")
        self.wait("host joins", lambda: self.host()["state"] == "open")
        pid = self.wait("worker runs", lambda: self.worker().get("pid"))
        incarnation = self.host()["incarnation"]
        self.say(
            f"{HOST} joined as a provisioned instance and is open (incarnation {incarnation}: "
            f"the join answer carried its host credential, kept 0600 in the state directory); "
            f"the agent started the worker (pid {pid}) with the template's 2 slots."
        )

    def run_a_job(self) -> None:
        job = self.api("POST", "/v1/jobs", json={"command": ["sleep", "1"]})
        self.say(f"Submitted job {job['id']} (sleep 1); the controller placed it on {HOST}.")
        self.wait("job runs", lambda: self.job(job["id"])["state"] == "running")
        self.say(f"Job {job['id']} is running on the worker.")
        self.wait("job finishes", lambda: self.job(job["id"])["state"] == "done")
        self.say(f"Job {job['id']} finished; the worker reported it done.")

    def crash_the_worker(self) -> None:
        old = self.worker()["pid"]
        os.kill(old, signal.SIGKILL)
        self.say(f"Killed the worker (pid {old}) with SIGKILL to show supervision.")
        new = self.wait(
            "worker restarted",
            lambda: (self.worker().get("pid") or old) != old and self.worker()["pid"],
        )
        self.say(
            f"The agent noticed the exit and restarted the worker at once (pid {new}, "
            f"restarts {self.worker()['restarts']})."
        )

    def decommission_while_a_job_runs(self) -> None:
        job = self.api("POST", "/v1/jobs", json={"command": ["sleep", "4"]})
        self.wait("second job runs", lambda: self.job(job["id"])["state"] == "running")
        self.say(f"Submitted job {job['id']} (sleep 4); it is running.")
        host = self.api(
            "POST",
            f"/v1/hosts/{HOST}/decommission",
            json={"drain_timeout": 20, "policy": "requeue", "reason": "reclaimed by the provider"},
        )
        self.say(
            f"Decommissioned {HOST} (drain timeout 20s, policy requeue): it is "
            f"{host['state']}, closed to new work, waiting for {host['jobs_running']} job."
        )
        if host["state"] != "draining":
            raise DemoFailed(f"expected the host to drain, it is {host['state']}")
        time.sleep(1.0)
        if self.worker().get("phase") != "running":
            raise DemoFailed("the worker stopped before its job finished")
        self.say("One second later the drain is still waiting for the job; the worker runs on.")
        self.wait("drain ends", lambda: self.host()["state"] == "decommissioned", 15)
        self.say(
            f"Job {job['id']} finished ({self.job(job['id'])['state']}); the host is now "
            "decommissioned and its rejoin is refused."
        )
        self.wait("worker stopped", lambda: self.worker().get("phase") == "stopped")
        tomb = self.state().get("tombstone") or {}
        self.say(
            f"The agent learned it through its watch, recorded a tombstone "
            f"({tomb.get('reason')!r}) and stopped the worker gracefully."
        )
        time.sleep(2.0)
        if self.worker().get("phase") != "stopped" or self.worker().get("pid"):
            raise DemoFailed("the worker was started again after the decommission")
        self.say(
            "Two seconds later the worker is still stopped: it will never be restarted "
            "on this instance, even across agent restarts and reboots."
        )

    def show_to_return(self) -> None:
        def listed() -> Any:
            entries = self.api("GET", "/v1/to-return")
            return next(
                (
                    e
                    for e in entries
                    if e["instance_id"] == INSTANCE
                    and (e.get("report") or {}).get("agent_state") == "decommissioned"
                ),
                None,
            )

        entry = self.wait("to-return listing", listed)
        comps = ", ".join(f"{c['name']} {c['state']}" for c in entry["report"]["components"])
        self.say(
            f"{INSTANCE} is on the provisioner's to-return list; the agent's last report: "
            f"{comps}. The provisioner can now give the instance back."
        )

    def show_why(self) -> None:
        from xce_controller.core.story import story
        from xce_protocol.times import times_to_epoch

        host = times_to_epoch(self.host())  # the story counts seconds (answers: RFC 3339)
        response = requests.get(
            f"{self.url}/v1/events",
            params={"host": INSTANCE},
            headers=self.controller.admin_headers,
            timeout=10,
        )
        events = [times_to_epoch(json.loads(line)) for line in response.text.splitlines() if line]
        self.say(f"Why is {HOST} gone? `xcecli why {HOST}` tells its story from the facts:")
        for line in story(host, events, time.time()):
            self.out(f"          {line}")
        metrics = (self.tmp / "xce-agent.prom").read_text()
        gone = "xce_agent_decommissioned 1" in metrics
        if not gone:
            raise DemoFailed("the agent's metrics file does not say it was decommissioned")
        self.say(
            "The agent's metrics file for node_exporter says the same "
            "(xce_agent_decommissioned 1); the controller's /metrics counts the "
            "decommission and the to-return entry for the alert rules in monitoring/."
        )

    def cleanup(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGUSR2)  # stop components, then the agent
            try:
                self.agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait()
        pid = self.worker().get("pid")
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        if self.controller is not None:
            self.controller.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def run_demo(out: Callable[[str], None] = print) -> int:
    try:
        import fastapi  # noqa: F401
    except ImportError:
        out("the demo needs FastAPI and uvicorn: apt install python3-fastapi python3-uvicorn")
        return 2
    demo = Demo(out)
    try:
        demo.run()
    except DemoFailed as exc:
        demo.say(f"FAILED: {exc}")
        log = demo.tmp / "agent.log"
        if log.exists():
            out("--- agent log ---\n" + log.read_text()[-3000:])
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        demo.cleanup()
    demo.say("Done: every step happened as shown; all processes and files are cleaned up.")
    return 0
