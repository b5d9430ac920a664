"""Never two copies of a component: random schedules of operator and host actions against
real agents (never_two_rig.py), sampled from cgroup.procs all along. At most one copy of
each component at every sample, none of the worker after a decommission, and each host runs
its worker again after every step.

`make test` runs 40 schedules, or the few more it takes for the seed's schedules to play
every step (never_two_rig.covering); `make never-two-soak` runs 500, the README's table 1,000.
XCE_NEVER_TWO_SCHEDULES and XCE_NEVER_TWO_SEED change the run; a failing schedule is printed
as `schedule SEED:INDEX`, and
`python -m bench never-two --seed SEED --first INDEX --schedules 1 --lanes 1` plays it again.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.integration import never_two as nt
from tests.integration.never_two_rig import STEPS, covering, run_schedules

# 40 and every step at least once: the time of 100 was spent on steps already seen.
SCHEDULES = int(os.environ.get("XCE_NEVER_TWO_SCHEDULES", "40"))
ROOT = nt.usable_root()
pytestmark = pytest.mark.skipif(
    ROOT is None or not nt.can_mount(), reason="needs root, mount(8) and a writable cgroup v2"
)


def test_never_two_copies_under_random_schedules(tmp_path: Path) -> None:
    assert ROOT is not None
    seed = int(os.environ.get("XCE_NEVER_TWO_SEED", str(random.SystemRandom().randrange(10**6))))
    count = covering(seed, SCHEDULES)
    cgroup = ROOT / f"xce-never-two-checker-{os.getpid()}"
    cgroup.mkdir()
    try:
        report = run_schedules(tmp_path, cgroup, seed, count)
    finally:
        nt.remove_tree(cgroup)
    summary = f"seed {seed}: {report.line()}"
    print(summary)
    assert len(report.schedules) == count, summary
    assert all(report.steps.get(step) for step in STEPS), summary  # every step was played
    assert report.samples > count * 10, summary  # the sampler ran all along
    assert report.violations == [], f"{summary}\n" + "\n".join(report.violations[:20])
    assert report.stuck == [], f"{summary}\n" + "\n".join(report.stuck[:5])
