"""Which boot this is: the boot id the agent reports to the controller and records with every
process it starts (and with itself), and whether a record is from this boot.

The kernel's boot id alone does not tell a container's reboot. A container shares its host's
kernel; systemd-nspawn mounts a boot id of its own over /proc/sys/kernel/random/boot_id, but a
service with a private /proc/sys (ProtectKernelTunables=, as xce-agent.service has) reads the
kernel's, the same before and after the container rebooted. What every boot does start again
is PID 1: its start time (field 22 of /proc/1/stat, clock ticks since the kernel booted)
joins the kernel's id. A restart of the agent keeps both; a reboot, of a machine or of a
container, changes at least one.
"""

from __future__ import annotations

import functools
from pathlib import Path

SEPARATOR = "+"  # between the kernel's boot id and PID 1's start time: "<uuid>+<ticks>"


def kernel_boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def init_start_ticks() -> int:
    """When PID 1 (of this PID namespace) started, in clock ticks since the kernel booted;
    0 when /proc does not show it (hidepid=)."""
    try:
        with open("/proc/1/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return 0


@functools.lru_cache(maxsize=1)
def boot_id() -> str:
    """This boot's id, "<kernel boot id>+<PID 1 start ticks>" (the kernel's id alone when
    PID 1 cannot be read). At most 57 characters."""
    init = init_start_ticks()
    kernel = kernel_boot_id()
    return f"{kernel}{SEPARATOR}{init}" if init else kernel


def boot_time() -> float:
    """When the kernel booted, in epoch seconds (btime of /proc/stat)."""
    try:
        with open("/proc/stat", "rb") as handle:
            for line in handle:
                if line.startswith(b"btime "):
                    return float(int(line.split()[1]))
    except (OSError, ValueError):
        pass
    return 0.0


def _parts(boot: str) -> tuple[str, str]:
    kernel, _, init = boot.partition(SEPARATOR)
    return kernel, init


def same_boot(recorded_id: str, recorded_boot_time: float) -> bool:
    """The record (a boot id, and the btime seen with it) is from this boot.

    PID 1 started at another time: another boot (a container's reboot keeps the kernel's id).
    Otherwise the kernel's id decides, except where two views of it differ within one boot:
    nspawn's own id, seen from a shell, against the kernel's, seen by a service with a
    private /proc/sys. Then the boot time decides (a reboot moves it by far more than the 2 s
    a clock step could). A record without PID 1's start time (an older agent's) is judged by
    the kernel's id and the boot time alone.
    """
    kernel, init = _parts(recorded_id)
    now_kernel, now_init = _parts(boot_id())
    if init and now_init and init != now_init:
        return False
    if kernel == now_kernel:
        return True
    return recorded_boot_time > 0 and abs(recorded_boot_time - boot_time()) <= 2.0
