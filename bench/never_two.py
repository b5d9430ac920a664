"""Never two copies, at length: the never-two checker's rig (tests/integration/never_two_rig.py)
under many random schedules, each printed so a counterexample can be played again alone
(`--seed S --first I --schedules 1 --lanes 1`)."""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path

from bench import Skipped
from bench.stats import percentile, table
from tests.integration import never_two as nt
from tests.integration.never_two_rig import Report, run_schedules, schedule


def run(schedules: int = 1000, seed: int | None = None, first: int = 0, lanes: int = 4) -> str:
    root = nt.usable_root()
    if root is None or not nt.can_mount():
        raise Skipped("needs root, mount(8) and a writable cgroup v2")
    seed = seed if seed is not None else random.SystemRandom().randrange(10**6)
    cgroup = root / f"xce-never-two-bench-{os.getpid()}"
    cgroup.mkdir()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            report = run_schedules(Path(tmp), cgroup, seed, schedules, lanes, first)
        finally:
            nt.remove_tree(cgroup)
        kept = [
            f"--- {p.name}, its end:\n" + "\n".join(p.read_text().splitlines()[-40:])
            for p in sorted(Path(tmp).glob("counterexample-*.log"))
        ]
    elapsed = time.monotonic() - started
    lines = [
        f"seed {seed}: {report.line()}; {elapsed:.0f}s",
        f"violations: {len(report.violations)}"
        " (two copies at once, or a worker after its decommission)",
    ]
    if schedules <= 20:
        lines += [schedule(seed, i).describe() for i in range(first, first + schedules)]
    lines += [durations(report), *report.violations[:50], *report.stuck[:20]]
    lines += kept[:5]
    return "\n".join(lines)


def durations(report: Report) -> str:
    rows = [
        [kind, str(len(times))] + [f"{percentile(times, p):.2f}" for p in (50, 95)]
        for kind, times in sorted(report.durations.items())
    ]
    return table(
        "Never two: a step and the host settled after it, in seconds",
        ["step", "n", "p50", "p95"],
        rows,
    )
