"""Every benchmark section runs (`python -m bench --quick SECTION`), so a bench cannot rot unseen.

The figures are not asserted (tiny sizes on a shared machine): only that each section ran to
its end and printed its table, or said why it cannot run here (`SECTION: skipped (REASON)`:
no C compiler, no supervisord, no PostgreSQL, no root with cgroup v2), which the test reports
as a skip with that reason. `make bench` once failed as shipped for months (a config the
agent had come to refuse, a controller that had come to want a join token). The quick sizes
keep the whole pass under two minutes on two shared cores (bench/__main__.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# section -> the start of the title its table prints
SECTIONS = {
    "supervision": "Supervision",
    "flood": "Output flood beside a crasher",
    "decommission": "Decommission latency",
    "notices": "Notice latency",
    "controller": "Controller load",
    "simulator": "Simulator",
    "leases": "Leases (ttl",
    "ha": "Controller replicas",
    "never-two": "Never two: a step",
    "provisioner-idle": "provisioner idle:",
}


@pytest.mark.parametrize("section", list(SECTIONS))
def test_the_bench_section_runs_quick(section: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", section],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,  # a hang fails in minutes, not at the CI job's limit
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    printed = out.stdout
    assert out.returncode == 0, printed[-2000:] + out.stderr[-2000:]
    skipped = re.search(rf"^{re.escape(section)}: skipped \((.*)\)$", printed, re.MULTILINE)
    if skipped:
        pytest.skip(f"bench {section}: {skipped.group(1)}")
    assert SECTIONS[section] in printed, f"{section}: no table\n{printed[-3000:]}"
    assert f"({section}: " in printed, f"{section}: did not run to its end\n{printed[-3000:]}"
