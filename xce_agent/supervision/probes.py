"""Liveness probes: exec, TCP and HTTP checks, each bounded by the probe's timeout.

A probe runs on a short-lived thread so a slow check never blocks the event loop; its
result goes back to the loop as a ProbeResult event.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import urllib.error
import urllib.request

from xce_agent.supervision.process import credentials
from xce_agent.supervision.spec import ProbeKind, ProbeSpec

DETAIL_MAX = 160  # characters of a failed probe's detail: what the server said is not trusted


def run_probe(probe: ProbeSpec) -> tuple[bool, str]:
    """(ok, detail) for one probe attempt."""
    try:
        if probe.kind is ProbeKind.EXEC:
            return _exec(probe)
        if probe.kind is ProbeKind.TCP:
            return _tcp(probe)
        return _http(probe)
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"


def _exec(probe: ProbeSpec) -> tuple[bool, str]:
    creds = credentials(probe.user, probe.group)
    proc = subprocess.Popen(
        list(probe.command),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        user=creds.user,
        group=creds.group,
        extra_groups=creds.extra_groups,
    )
    try:
        code = proc.wait(timeout=probe.timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return False, f"exec probe timed out after {probe.timeout:g}s"
    _kill_group(proc)  # what the probe left in its group would run on, one more per period
    return code == 0, f"exec probe exited with code {code}"


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # Safe after the leader was reaped: a pid is not reused while its group has members.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _tcp(probe: ProbeSpec) -> tuple[bool, str]:
    try:
        with socket.create_connection((probe.host, probe.port), timeout=probe.timeout):
            return True, "tcp connect ok"
    except OSError as exc:
        return False, f"tcp connect to {probe.host}:{probe.port} failed: {exc.strerror or exc}"


class _Unfollowed(urllib.request.HTTPRedirectHandler):
    """A redirect is the component's answer (a 3xx: alive), not a place to go: followed, it
    would probe another server, maybe on another host, in the component's name."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


# No proxy from the environment either (an http_proxy meant for the way out): the component
# is probed where it runs.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _Unfollowed())


def _http(probe: ProbeSpec) -> tuple[bool, str]:
    request = urllib.request.Request(probe.url, method="GET")  # noqa: S310 - http(s) checked
    try:
        with _OPENER.open(request, timeout=probe.timeout) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        # A garbled answer (another server on a reused port, a half-dead one) fails the probe too.
        return False, f"http probe failed: {_said(getattr(exc, 'reason', exc))}"
    return 200 <= status < 400, f"http probe got status {status}"


def _said(reason: object) -> str:
    """What went wrong, on one line: a garbled status line is the server's own bytes (line
    breaks, control characters), and this detail ends up in the log and the component's reason."""
    text = str(reason)
    if isinstance(reason, BaseException):
        text = f"{type(reason).__name__}: {text}" if text else type(reason).__name__
    text = repr(text)[1:-1] if not text.isprintable() else text
    return text if len(text) <= DETAIL_MAX else text[: DETAIL_MAX - 3] + "..."
