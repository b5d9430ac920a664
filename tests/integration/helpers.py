"""Shared helpers for tests that run real processes."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import requests


def wait_for(predicate: Callable[[], object], timeout: float = 10.0, step: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(step)
    raise AssertionError(f"condition not met within {timeout}s")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def watch_for_change(
    fetch: Callable[[int], requests.Response], since: int, within: float = 15.0
) -> requests.Response:
    """Watch from version `since` until the answer is not "nothing changed", as an agent does.

    A hold may end with no change: a host's first watch of a round is held for a random share
    of what it asked (xce_controller/watch_expiry.py), at times a few milliseconds."""
    deadline = time.monotonic() + within
    while True:
        answer = fetch(since)
        if answer.status_code != 200 or answer.json()["version"] > since:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing changed after version {since} within {within}s")


def watches_held(metrics: str) -> int:
    """The controller's held watches, from its /metrics text."""
    for line in metrics.splitlines():
        if line.startswith("xce_controller_watches_held "):
            return int(float(line.split()[1]))
    raise AssertionError("no xce_controller_watches_held in the metrics")
