"""Which boot this is: the kernel's boot id and PID 1's start time, and when a record is from
this boot (a container's reboot keeps the kernel's id; two views of one boot may differ)."""

from __future__ import annotations

from pathlib import Path

import pytest

from xce_agent.supervision import boot
from xce_agent.supervision.identity import start_ticks

KERNEL = "6d1c2e5a-0f3b-4c47-9a61-3b1d2c4e5f60"
NSPAWN = "0a9b8c7d-6e5f-4a3b-8c2d-1e0f9a8b7c6d"


def test_the_boot_id_is_the_kernels_and_pid_1s_start() -> None:
    kernel = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert boot.boot_id() == f"{kernel}+{start_ticks(1)}"
    assert len(boot.boot_id()) <= 64  # what the protocol's boot_id field takes
    assert boot.same_boot(boot.boot_id(), boot.boot_time())


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> None:
    """This boot: the kernel's id KERNEL, PID 1 started at tick 5000, btime 1e9."""
    monkeypatch.setattr(boot, "boot_id", lambda: f"{KERNEL}+5000")
    monkeypatch.setattr(boot, "boot_time", lambda: 1e9)


@pytest.mark.usefixtures("now")
@pytest.mark.parametrize(
    ("recorded", "btime", "same"),
    [
        (f"{KERNEL}+5000", 1e9, True),  # an agent restart
        (f"{KERNEL}+4000", 1e9, False),  # the container rebooted: same kernel, same btime
        (f"{NSPAWN}+5000", 1e9, True),  # nspawn's id from a shell, the kernel's for a service
        (f"{NSPAWN}+5000", 1e9 - 600, False),  # another kernel boot whose init started alike
        (f"{NSPAWN}+5000", 0.0, False),  # and nothing to tell them apart by
        (KERNEL, 0.0, True),  # an older agent's record: the kernel's id alone
        (NSPAWN, 1e9 + 1, True),
        (NSPAWN, 1e9 - 600, False),
        ("", 0.0, False),
    ],
)
def test_same_boot(recorded: str, btime: float, same: bool) -> None:
    assert boot.same_boot(recorded, btime) is same


def test_without_pid_1_the_kernels_id_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(boot, "init_start_ticks", lambda: 0)
    monkeypatch.setattr(boot, "kernel_boot_id", lambda: KERNEL)
    assert boot.boot_id.__wrapped__() == KERNEL
