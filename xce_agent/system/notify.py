"""systemd seams: notification (READY, STATUS, WATCHDOG, STOPPING; silent when not under
systemd), and whether systemd is taking the machine down."""

from __future__ import annotations

import logging
import os
import subprocess
from typing import Protocol

log = logging.getLogger(__name__)


class Notifier(Protocol):
    def notify(self, message: str) -> None: ...


class SystemdNotifier:
    """sd_notify through the sdnotify package; a no-op without NOTIFY_SOCKET."""

    def __init__(self) -> None:
        self._socket = os.environ.get("NOTIFY_SOCKET")
        self._impl = None
        if self._socket:
            import sdnotify

            self._impl = sdnotify.SystemdNotifier()

    def notify(self, message: str) -> None:
        if self._impl is not None:
            self._impl.notify(message)


def watchdog_interval() -> float | None:
    """Half of WATCHDOG_USEC in seconds when the watchdog is meant for this process."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        value = int(usec)
    except ValueError:
        log.warning("ignoring WATCHDOG_USEC=%r: not an integer", usec)
        return None
    return value / 2_000_000 if value > 0 else None


def system_shutting_down() -> bool:
    """True while systemd is taking the machine down (then SIGTERM stops the components)."""
    try:
        result = subprocess.run(
            ["systemctl", "is-system-running"],
            check=False,
            capture_output=True,
            text=True,
            timeout=2,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return result.stdout.strip() == "stopping"
