"""`decommission --wait` and `close --wait`: follow a host until its drain is over, like
`nomad node drain -monitor`, and end with the outcome as the exit code.

What a host record means for the wait is a pure function (`drain_progress`, `close_progress`);
`follow` polls the controller and prints a line when the picture changes (state, jobs left) and
at least every `every` seconds, so a long drain still shows its countdown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xce_controller.cli.client_errors import ControllerUnreachable
from xce_controller.cli.text import span
from xce_controller.core.model import HostState
from xce_protocol.errors import XceError
from xce_protocol.times import parse_time

Host = dict[str, Any]


class WaitFailed(XceError):
    """The host ended somewhere other than where the wait was for (reopened, lost, ...)."""

    exit_code = 1


class WaitInterrupted(XceError):
    """The operator stopped the wait (Ctrl-C); what was asked of the host still stands."""

    exit_code = 130  # 128 + SIGINT, as a shell reports an interrupted command


@dataclass(frozen=True)
class Progress:
    done: bool  # the wait is over, one way or the other
    ok: bool  # ... and the host got where it was asked to
    line: str  # what to print (without the countdown, which changes every second)
    countdown: str = ""


def _shown(h: Host) -> str:
    return str(h.get("name") or h.get("expected_name") or h.get("instance_id") or "-")


def _jobs(h: Host) -> str:
    n = int(h.get("jobs_running") or 0)
    return "no jobs left" if n == 0 else f"{n} job{'s' if n != 1 else ''} left"


def drain_progress(h: Host, now: float) -> Progress:
    """Where a decommissioned host's drain stands."""
    state, name = h.get("state"), _shown(h)
    if state in (HostState.DECOMMISSIONED, HostState.RETURNED):
        return Progress(True, True, f"{name}: {state} ({h.get('reason', '')})")
    if state != HostState.DRAINING:
        return Progress(True, False, f"{name}: {state} before its drain ended ({h.get('reason')})")
    drain = h.get("drain") or {}
    deadline = parse_time(drain.get("deadline"))
    policy = drain.get("policy", "-")
    if deadline is None:
        countdown = f"no drain deadline (policy {policy})"
    else:
        countdown = f"policy {policy} applies in {span(deadline - now)}"
    return Progress(False, False, f"{name}: draining, {_jobs(h)}", countdown)


def close_progress(h: Host, now: float) -> Progress:
    """Whether a closed host is idle yet (its running jobs finished)."""
    state, name = h.get("state"), _shown(h)
    if state != HostState.CLOSED:
        return Progress(True, False, f"{name}: {state} before its jobs ended ({h.get('reason')})")
    if not h.get("jobs_running"):
        return Progress(True, True, f"{name}: closed, no jobs left")
    return Progress(False, False, f"{name}: closed, {_jobs(h)}")


def follow(
    fetch: Callable[[], Host],
    progress: Callable[[Host, float], Progress],
    echo: Callable[[str], None],
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    interval: float = 1.0,
    every: float = 30.0,
) -> None:
    """Poll until the wait is over; raise WaitFailed if it ended badly. A controller that
    cannot be reached for a while (a restart) is waited for, and said so once."""
    repeat = max(1, round(every / interval))  # polls between two lines saying the same
    last_line, since_shown, unreachable = "", 0, False
    while True:
        try:
            h = fetch()
        except ControllerUnreachable as exc:
            if not unreachable:
                echo(f"{exc} (still waiting)")
            unreachable = True
            sleep(interval)
            continue
        unreachable = False
        now = clock()
        p = progress(h, now)
        if p.done:
            if not p.ok:
                raise WaitFailed(p.line)
            echo(p.line)
            return
        if p.line != last_line or since_shown >= repeat:
            echo(f"{p.line}, {p.countdown}" if p.countdown else p.line)
            last_line, since_shown = p.line, 0
        since_shown += 1
        sleep(interval)
