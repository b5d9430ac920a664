"""The provisioner's memory when idle: many passes over machines that need nothing, each
reading the records and every machine's power through the Redfish driver (a loopback BMC in
its own process: tests/integration/fake_bmc.py), on a fast clock (one pass a second of it).

`python -m bench provisioner-idle --passes 3600` is an hour of passes at `interval: 1s`; it
prints the resident set size after the warm-up and at checkpoints.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xce_provisioner.config import Config, ControllerSettings
from xce_provisioner.controller import Lease
from xce_provisioner.drivers.base import PowerDriver
from xce_provisioner.drivers.redfish import RedfishDriver, RedfishSettings
from xce_provisioner.plan import Machine, Policy, Record
from xce_provisioner.runner import Runner

WARM_UP = 100  # passes before the first figure (imports, pools, first session)


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class IdleController:
    """Every machine open with a job running: nothing to do, every pass."""

    lease = Lease("provisioner", 7)

    def __init__(self, machines: int) -> None:
        self.recs = {
            f"rf-{i}": Record(f"rf-{i}", "open", f"open@{i}.0", 1) for i in range(machines)
        }

    def records(self) -> dict[str, Record]:
        return self.recs


def measure(passes: int, machines: int = 3, every: int = 600) -> list[tuple[int, int, float]]:
    """(pass, RSS KiB, seconds) after the warm-up and every `every` passes, and at the end."""
    bmc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.fake_bmc"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert bmc.stdout is not None
        url = bmc.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            where = Path(tmp)
            (where / "u").write_text("u\n")
            (where / "p").write_text("p\n")
            settings = RedfishSettings(url, where / "u", where / "p", timeout=5.0)
            drivers: dict[str, PowerDriver] = {"lab": RedfishDriver(settings)}
            inventory = tuple(
                Machine(f"node{i}", f"rf-{i}", "small", "lab", "/redfish/v1/Systems/1")
                for i in range(machines)
            )
            cfg = Config(
                ControllerSettings(("http://unused",), Path("/unused")),
                Policy(),
                {},
                inventory,
                metrics_file=where / "m.prom",
            )
            clock = [0.0]
            runner = Runner(
                cfg,
                IdleController(machines),  # type: ignore[arg-type]
                drivers,
                monotonic=lambda: clock[0],
                status_file=where / "status",
            )
            figures = []
            began = time.monotonic()
            try:
                for n in range(1, passes + 1):
                    runner.once()
                    clock[0] += 1.0
                    if n in (WARM_UP, passes) or (n > WARM_UP and n % every == 0):
                        gc.collect()
                        figures.append((n, rss_kib(), time.monotonic() - began))
            finally:
                # As xce-provisioner does: left to the interpreter's exit, sushy's __del__
                # logs out through the bounded transport, whose deadline thread cannot start
                # then, and the process hung after printing its table.
                for driver in drivers.values():
                    driver.close()
            return figures
    finally:
        bmc.kill()
        bmc.wait()
        if bmc.stdout is not None:
            bmc.stdout.close()


def run(passes: int = 3600) -> str:
    figures = measure(passes)
    base = figures[0][1]
    lines = [
        f"provisioner idle: {passes} passes, 3 machines (noisy: a shared machine)",
        f"{'PASS':>6} {'RSS KiB':>9} {'GROWTH':>8} {'SECONDS':>8}",
    ]
    lines += [f"{n:>6} {rss:>9} {rss - base:>8} {s:>8.0f}" for n, rss, s in figures]
    return "\n".join(lines)
