"""The simulator on the 100,000-host, 24-virtual-hour scenario with faults: wall time against
the target, and what it found."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from bench.stats import table

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCENARIO = EXAMPLES / "scenario-100k.yaml"


def run(quick: bool = False) -> str:
    """`quick`: the same scenario, every kind of fault and both restarts, at 2,000 hosts over
    6 virtual hours (a second or two: `make test` runs it)."""
    from xce_controller.sim.scenario import load_scenario
    from xce_controller.sim.simulate import run_scenario

    spec = load_scenario(SCENARIO)
    if quick:
        hour = 3600.0
        spec = dataclasses.replace(
            spec, hosts=2000, duration=6 * hour, reclaims=400, reclaim_window=(hour, 5 * hour)
        )
    began, cpu = time.perf_counter(), time.process_time()
    summary = run_scenario(spec)
    took, cpu = time.perf_counter() - began, time.process_time() - cpu
    rows = [
        [
            f"{spec.hosts:,} hosts, {spec.duration / 3600:g} virtual hours, "
            f"{spec.restarts} controller restarts",
            f"{took:.1f} s (CPU {cpu:.1f} s)",
            f"{summary.facts:,} facts ({summary.facts / took:,.0f}/s)",
            "" if quick else "< 60 s",
        ]
    ]
    title = f"Simulator, {time.strftime('%Y-%m-%d')}"
    return table(title, ["scenario", "wall time", "work", "target"], rows) + "\n" + summary.render()
