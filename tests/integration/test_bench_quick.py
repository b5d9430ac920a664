"""Every benchmark section runs (`python -m bench --quick`), so a bench cannot rot unseen.

The figures are not asserted (tiny sizes on a shared machine): only that each section ran to
its end and printed its table. `make bench` once failed as shipped for months (a config the
agent had come to refuse, a controller that had come to want a join token).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Minutes on a 2-core machine (the simulator and the lease schedules most of it): `make
# bench-quick` runs it; `make test` only when XCE_BENCH_QUICK=1.
pytestmark = pytest.mark.skipif(
    os.environ.get("XCE_BENCH_QUICK") != "1", reason="the quick bench pass: make bench-quick"
)

ROOT = Path(__file__).resolve().parents[2]
SUPERVISORD = ROOT / "bench" / ".venv" / "bin" / "supervisord"

# section -> the start of the title its table prints
SECTIONS = {
    "flood": "Output flood beside a crasher",
    "decommission": "Decommission latency",
    "notices": "Notice latency",
    "controller": "Controller load",
    "simulator": "Simulator",
    "leases": "Leases (ttl",
    "never-two": "never-two",  # its table, or its skip line without root and cgroup v2
}


def run_quick(*sections: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", *sections],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout


def test_every_bench_section_runs_quick() -> None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("the benchmarks' crashing child needs a C compiler (cc)")
    printed = run_quick(*SECTIONS)
    for section, title in SECTIONS.items():
        assert title.lower() in printed.lower(), f"{section}: no table\n{printed[-3000:]}"


def test_the_supervision_section_runs_quick() -> None:
    if not SUPERVISORD.exists():
        pytest.skip("supervisord, the supervision bench's peer, is installed by `make bench`")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("the benchmarks' crashing child needs a C compiler (cc)")
    printed = run_quick("supervision")
    assert "Supervision" in printed and "idle wakeups" in printed, printed
