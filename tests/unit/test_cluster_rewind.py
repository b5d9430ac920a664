"""A change taken back (Cluster.mark/rewind) leaves the state exactly as it was, every index
included: a replica's change refused as stale is undone this way instead of by a whole reload
(docs/ha.md). Checked on the facts of a simulated day (joins, drains, jobs placed, killed and
requeued, hosts lost and returned), each run of a few facts applied, taken back, compared."""

from __future__ import annotations

import random
from pathlib import Path

from tests.unit.test_simulate import SCENARIO
from xce_controller.core.facts import apply
from xce_controller.core.model import Cluster, Fact
from xce_controller.sim.scenario import load_scenario
from xce_controller.sim.simulate import Simulation


def test_every_run_of_facts_taken_back_leaves_the_cluster_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)
    facts: list[Fact] = []
    Simulation(load_scenario(path), lambda _now, fact: facts.append(fact)).run()
    assert {"joined", "drain", "job_assigned", "job_killed", "state"} <= {f.kind for f in facts}
    rnd = random.Random(7)  # noqa: S311 - a reproducible sample
    # `twin` never takes anything back: the cluster must equal it after each rewind.
    cluster, twin, done, checked = Cluster(), Cluster(), 0, 0
    while done < len(facts):
        run = facts[done : done + rnd.randint(1, 8)]
        if rnd.random() < 0.2:  # comparing whole clusters each time would take minutes
            mark = cluster.mark()
            for fact in run:
                apply(cluster, fact)
            cluster.rewind(mark)
            assert cluster == twin, f"facts {done}..{done + len(run)} left a trace"
            checked += 1
        for fact in run:
            apply(cluster, fact)
            apply(twin, fact)
        done += len(run)
    assert checked > 100
