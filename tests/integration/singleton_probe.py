"""A singleton component that records its own life: start (with its fencing token), a tick
every TICK seconds while it runs, and its stop. One file per process, so nothing interleaves.

Run as `python singleton_probe.py DIR HOST` (it exits at once with 3 while DIR/crash-HOST
exists); times are the system's monotonic clock, which
every process on the machine shares, so the records of all hosts can be compared.

A file is named by host and pid, and pids are reused: a long run on a busy machine goes
round the pid space (32768 by default) more than once, and a later probe of the same lease and
host may get the pid of an earlier one. It never appends to that one's file (which would make
the two one interval, running from the first's start to the second's end): it takes the next
free name, `HOST-PID.N.rec`.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import TextIO

TICK = 0.02


def pid_of(path: Path) -> int:
    """The pid of the probe that wrote `path` (HOST-PID.rec or HOST-PID.N.rec)."""
    return int(path.name.split(".", 1)[0].rsplit("-", 1)[1])


def open_record(directory: str, lease: str, host: str, pid: int) -> TextIO:
    """A new record file of its own (created, never one an earlier process wrote)."""
    folder = os.path.join(directory, lease)
    os.makedirs(folder, exist_ok=True)
    for n in range(1000):
        name = f"{host}-{pid}.rec" if n == 0 else f"{host}-{pid}.{n}.rec"
        try:
            return open(os.path.join(folder, name), "x", buffering=1)  # kept open by the caller
        except FileExistsError:
            continue  # a previous process with this pid
    raise FileExistsError(f"{folder}: no free record name for {host}-{pid}")


def main() -> None:
    directory, host = sys.argv[1], sys.argv[2]
    lease = os.environ.get("XCE_LEASE_NAME", "")
    token = os.environ.get("XCE_LEASE_TOKEN", "")
    os.makedirs(os.path.join(directory, lease), exist_ok=True)
    if os.path.exists(os.path.join(directory, f"crash-{host}")):
        sys.exit(3)  # a broken install on this host: a crash loop before any work
    out = open_record(directory, lease, host, os.getpid())  # written until the process ends
    out.write(f"start {time.monotonic():.6f} {token} {host} {os.getpid()}\n")

    def stop(signum: int, frame: object) -> None:
        out.write(f"stop {time.monotonic():.6f}\n")
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        time.sleep(TICK)
        out.write(f"tick {time.monotonic():.6f}\n")


if __name__ == "__main__":
    main()
