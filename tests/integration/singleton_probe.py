"""A singleton component that records its own life: start (with its fencing token), a tick
every TICK seconds while it runs, and its stop. One file per process, so nothing interleaves.

Run as `python singleton_probe.py DIR HOST` (it exits at once with 3 while DIR/crash-HOST
exists); times are the system's monotonic clock, which
every process on the machine shares, so the records of all hosts can be compared.
"""

from __future__ import annotations

import os
import signal
import sys
import time

TICK = 0.02


def main() -> None:
    directory, host = sys.argv[1], sys.argv[2]
    lease = os.environ.get("XCE_LEASE_NAME", "")
    token = os.environ.get("XCE_LEASE_TOKEN", "")
    path = os.path.join(directory, lease, f"{host}-{os.getpid()}.rec")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.exists(os.path.join(directory, f"crash-{host}")):
        sys.exit(3)  # a broken install on this host: a crash loop before any work
    out = open(path, "a", buffering=1)  # noqa: SIM115 - written until the process ends
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
