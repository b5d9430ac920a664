"""`xce-agent sample-worker`: a stand-in for XCE's worker daemon, for demos and tests.

It checks in with the controller as a worker does (a watch with the worker credential the
agent's join obtained), runs the jobs dispatched to its host as child
processes (never more than the template's slots), reports their start and end, and exits
with DECOMMISSIONED_EXIT when its (re)join is refused because the host was decommissioned.
It reads what the agent handed it: XCE_TEMPLATE_FILE, XCE_HOST_NAME, XCE_INSTANCE_ID,
XCE_CONTROLLER_URL, XCE_CONTROLLER_CA_FILE (the agent's `ca_file`, for an https controller
whose certificate a private CA signed), XCE_CONTROLLER_CLIENT_CERT_FILE and _KEY_FILE (the
agent's client certificate, for a controller that requires one) and XCE_CREDENTIAL_FILE (the
token for its own requests: read once, kept in memory). Jobs get a clean environment (a fixed
PATH, their HOME and user, XCE_JOB_ID): nothing of the worker's, so neither the credential nor
its path. The worker also makes itself non-dumpable, so a job running as the same user cannot
read its memory through /proc.
Nothing a job or the controller says kills it: a job that cannot start is reported as finished
with code 127, malformed jobs are skipped, and watches start at least MIN_WATCH_GAP apart.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import requests

from xce_agent.controller.bounded_http import MAX_BODY, parse_json
from xce_protocol import replicas
from xce_protocol.errors import UsageError, XceError
from xce_protocol.protocol import Identity, Outcome, classify

DECOMMISSIONED_EXIT = 100  # documented: "my rejoin was refused: decommissioned"
CREDENTIAL_EXIT = 75  # EX_TEMPFAIL: the credential is not this host's any more; restart me
JOB_PATH = "/usr/local/bin:/usr/bin:/bin"
MIN_WATCH_GAP = 0.5  # between the starts of two watches, however fast (or badly) answered
NOT_STARTED_EXIT = 127  # a job whose command cannot be run, as a shell reports it
_PR_SET_DUMPABLE = 4
log = logging.getLogger("sample-worker")


def read_credential(env: dict[str, str]) -> str:
    """The token, read once; the inherited descriptor behind /dev/fd/N is closed after."""
    path = env.get("XCE_CREDENTIAL_FILE")
    if not path:
        return ""
    with open(path, encoding="utf-8") as handle:
        token = handle.read().strip()
    if path.startswith("/dev/fd/") and path[len("/dev/fd/") :].isdigit():
        with contextlib.suppress(OSError):
            os.close(int(path[len("/dev/fd/") :]))
    return token


def job_env(env: dict[str, str], job_id: int) -> dict[str, str]:
    """What a job sees: nothing the agent handed the worker."""
    clean = {"PATH": JOB_PATH, "XCE_JOB_ID": str(job_id)}
    for key in ("HOME", "USER", "LOGNAME", "LANG", "TZ"):
        if key in env:
            clean[key] = env[key]
    return clean


def not_dumpable() -> None:
    """Keep same-user processes (jobs) out of this process's memory and /proc entries."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


class Decommissioned(XceError):
    """The controller refused this worker's host as decommissioned: the worker is done."""

    exit_code = DECOMMISSIONED_EXIT


class CredentialRefused(XceError):
    """The controller no longer knows this worker's credential (the agent joined again)."""

    exit_code = CREDENTIAL_EXIT


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    job_id: int


class SampleWorker:
    def __init__(self, env: dict[str, str]) -> None:
        missing = [
            k for k in ("XCE_TEMPLATE_FILE", "XCE_HOST_NAME", "XCE_CONTROLLER_URL") if k not in env
        ]
        if missing:
            raise UsageError(f"{missing[0]} is not set: run the sample worker under the agent")
        with open(env["XCE_TEMPLATE_FILE"]) as handle:
            doc = json.load(handle)
        self.slots = int(doc["template"]["slots"])
        self.host = env["XCE_HOST_NAME"]
        self.instance = env.get("XCE_INSTANCE_ID", "")
        # One URL, or the replicas' comma-separated list (controller.url as a list).
        self.urls = [u.strip().rstrip("/") for u in env["XCE_CONTROLLER_URL"].split(",")]
        self.current = 0
        self.env = env
        self.session = requests.Session()
        # Given on every request: requests lets REQUESTS_CA_BUNDLE override a session's verify.
        self.verify: str | bool = env.get("XCE_CONTROLLER_CA_FILE") or True
        cert, key = (
            env.get("XCE_CONTROLLER_CLIENT_CERT_FILE"),
            env.get("XCE_CONTROLLER_CLIENT_KEY_FILE"),
        )
        self.cert = (cert, key) if cert and key else None  # for a controller that requires one
        token = read_credential(env)
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self.running: dict[int, Running] = {}
        self.version = 0
        self.stopping = False

    def _request(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        """The status and the JSON body (None unless bounded, valid JSON, as for the agent);
        on to the next URL, as the agent does, when one cannot serve (replicas.moves_on)."""
        order = replicas.attempts(self.current, len(self.urls))
        for tried, index in enumerate(order, start=1):
            try:
                status, body = self._one(self.urls[index], method, path, **kw)
            except requests.RequestException:
                if tried == len(order):
                    raise
                status, body = None, None
            if not replicas.moves_on(status, replicas.code_of(body)) or tried == len(order):
                self.current = index
                return status or 0, body
            log.warning("controller %s could not serve: trying the next", self.urls[index])
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _one(self, url: str, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        # Like the agent, never follow a redirect: only the configured controller is heard.
        with self.session.request(
            method,
            url + path,
            allow_redirects=False,
            stream=True,
            verify=self.verify,
            cert=self.cert,
            **kw,
        ) as response:
            return response.status_code, read_json(response)

    def _post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        return self._request("POST", path, json=body, timeout=10)

    def join(self) -> bool:
        """Check in (a watch that returns at once; the agent did the join): True when the
        controller takes this host; raises Decommissioned when refused as decommissioned,
        CredentialRefused when the controller does not know its credential any more."""
        params: dict[str, str | int | float] = {
            "since": 0,
            "timeout": 0,
            "instance_id": self.instance,
        }
        status, answer = self._request(
            "GET", f"/v1/hosts/{self.host}/watch", params=params, timeout=15
        )
        self._check_refusal(status, answer)
        if status != 200:
            log.warning("check-in refused: HTTP %d %s", status, str(answer)[:200])
            return False
        try:
            self.version = int(answer.get("version", 0))
        except (ValueError, TypeError, AttributeError, OverflowError):
            log.warning("ignoring a malformed check-in answer")
            return False
        log.info("checked in as %s with %d slots", self.host, self.slots)
        return True

    def _check_refusal(self, status: int, body: Any) -> None:
        if status not in (401, 410):
            return
        # Only an answer of this protocol counts (classify): a 401 without a protocol version
        # is not the controller's, and must not cost the jobs.
        answer = classify(status, body, Identity(self.host, self.instance))
        if answer.outcome is Outcome.REFUSED and answer.body.get("error") == "unknown_credential":
            self.kill_all()
            raise CredentialRefused("credential refused: the agent joined again; restart me")
        if answer.outcome is Outcome.DECOMMISSIONED:
            self.kill_all()
            raise Decommissioned(f"rejoin refused: {answer.body.get('message')}")

    def step(self) -> None:
        """One watch; the next one starts no sooner than MIN_WATCH_GAP after this one did."""
        started = time.monotonic()
        self._watch()
        time.sleep(max(0.0, MIN_WATCH_GAP - (time.monotonic() - started)))

    def _watch(self) -> None:
        params: dict[str, str | int | float] = {
            "since": self.version,
            "timeout": 1.0,
            "instance_id": self.instance,
        }
        status, body = self._request(
            "GET", f"/v1/hosts/{self.host}/watch", params=params, timeout=15
        )
        self._check_refusal(status, body)
        if status != 200:
            return
        try:
            self.version = int(body.get("version", self.version))
            jobs = [j for j in body.get("jobs", []) if _well_formed(j)]
        except (ValueError, TypeError, AttributeError, OverflowError):
            log.warning("ignoring a malformed watch answer")
            return
        self.sync(jobs)

    def sync(self, jobs: list[dict[str, Any]]) -> None:
        mine = {j["id"]: j for j in jobs if j["state"] in ("assigned", "running")}
        for job_id in list(self.running):
            if job_id not in mine:  # killed or requeued by the controller
                log.info("job %d taken away: stopping it", job_id)
                self._kill(self.running.pop(job_id))
        for job_id, job in sorted(mine.items()):
            if job_id in self.running or len(self.running) >= self.slots:
                continue
            try:
                proc = subprocess.Popen(
                    job["command"],
                    start_new_session=True,
                    env=job_env(self.env, job_id),
                    stdin=subprocess.DEVNULL,
                )
            except (OSError, ValueError) as exc:  # the job's failure, never the worker's
                log.warning("job %d cannot start: %s", job_id, exc)
                self._post(
                    f"/v1/hosts/{self.host}/jobs/{job_id}/finished",
                    {"exit_code": NOT_STARTED_EXIT},
                )
                continue
            self.running[job_id] = Running(proc, job_id)
            self._post(f"/v1/hosts/{self.host}/jobs/{job_id}/started", {})
            log.info("job %d started: %s", job_id, " ".join(job["command"]))

    def reap(self) -> None:
        for job_id, run in list(self.running.items()):
            code = run.proc.poll()
            if code is None:
                continue
            del self.running[job_id]
            self._post(
                f"/v1/hosts/{self.host}/jobs/{job_id}/finished",
                {"exit_code": max(-255, min(255, code))},
            )
            log.info("job %d finished with %d", job_id, code)

    def _kill(self, run: Running) -> None:
        try:
            os.killpg(run.proc.pid, signal.SIGTERM)
            run.proc.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.proc.pid, signal.SIGKILL)
            run.proc.wait()

    def kill_all(self) -> None:
        for run in self.running.values():
            self._kill(run)
        self.running.clear()


def read_json(response: requests.Response) -> Any:
    """The body as JSON, read (and decoded) no further than MAX_BODY bytes."""
    data = bytearray()
    for chunk in response.iter_content(16384):
        data += chunk
        if len(data) > MAX_BODY:
            log.warning("ignoring an answer larger than %d bytes", MAX_BODY)
            return None
    return parse_json(bytes(data))


def _well_formed(job: Any) -> bool:
    if not isinstance(job, dict) or not isinstance(job.get("state"), str):
        return False
    job_id, command = job.get("id"), job.get("command")
    if not isinstance(job_id, int) or isinstance(job_id, bool):
        return False
    return isinstance(command, list) and bool(command) and all(isinstance(a, str) for a in command)


def unreachable(exc: requests.RequestException) -> str:
    """Why no answer came, as an operator reads it (the TLS reason named)."""
    if isinstance(exc, requests.exceptions.SSLError):
        seen: set[int] = set()
        todo: list[object] = [exc]
        while todo:  # the ssl error is kept a few exceptions deep
            item = todo.pop()
            if not isinstance(item, BaseException) or id(item) in seen:
                continue
            seen.add(id(item))
            if isinstance(item, ssl.SSLCertVerificationError):
                return f"TLS failed ({item.verify_message}; XCE_CONTROLLER_CA_FILE: {ca_shown()})"
            todo += [*item.args, getattr(item, "reason", None), item.__cause__, item.__context__]
        return "TLS failed"
    if isinstance(exc, requests.exceptions.Timeout):
        return "timed out"
    return f"connection failed ({type(exc).__name__})"


def ca_shown() -> str:
    return os.environ.get("XCE_CONTROLLER_CA_FILE") or "not set"


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stdout)
    not_dumpable()
    worker = SampleWorker(dict(os.environ))

    def on_term(signum: int, frame: object) -> None:
        worker.stopping = True

    signal.signal(signal.SIGTERM, on_term)
    while not worker.stopping:
        try:
            if worker.join():
                break
        except requests.RequestException as exc:
            log.warning("controller unreachable: %s", unreachable(exc))
        time.sleep(1)
    while not worker.stopping:
        try:
            worker.step()
        except requests.RequestException as exc:
            log.warning("controller unreachable: %s", unreachable(exc))
            time.sleep(1)
        worker.reap()
    log.info("stopping: %d jobs running", len(worker.running))
    worker.kill_all()
    return 0
