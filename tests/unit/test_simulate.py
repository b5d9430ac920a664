"""The simulator drives the live lifecycle in virtual time and reports what happened."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from xce_agent.errors import ConfigError
from xce_controller.scenario import load_scenario
from xce_controller.simulate import run_scenario

SCENARIO = """\
version: 1
hosts: 200
duration: 6h
seed: 3
join_delay: {distribution: uniform, min: 10s, max: 2m}
never_join: 0.1
spot_loss_per_hour: 0.05
reclaims: {count: 40, start: 1h, end: 4h, drain_timeout: 5m, policy: kill}
jobs: {per_host: 1, duration: {distribution: fixed, mean: 20m}}
return_delay: 1m
"""


def test_small_day_accounts_for_every_host(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)
    timeline = tmp_path / "timeline.csv"
    summary = run_scenario(load_scenario(path), timeline)
    assert sum(summary.counts.values()) == 200
    never = summary.counts.get("returned", 0) + summary.counts.get("overdue", 0)
    assert never >= 10  # overdue ones and reclaimed/lost ones are returned
    assert len(summary.drains) == 40
    assert all(0 <= d <= 300 for d in summary.drains)
    assert summary.jobs.get("killed", 0) > 0  # drains timed out on 20-minute jobs
    with timeline.open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == summary.facts
    kinds = {r["fact"] for r in rows}
    assert {"expected", "joined", "drain", "state", "job_killed"} <= kinds
    overdue = [r for r in rows if r["state"] == "overdue"]
    assert overdue and all(r["why"] == "not joined by its deadline" for r in overdue)
    text = summary.render()
    assert "simulated 200 hosts over 6.0 virtual hours" in text


def test_same_seed_same_story(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)
    first = run_scenario(load_scenario(path))
    second = run_scenario(load_scenario(path))
    assert first.counts == second.counts and first.facts == second.facts


def test_bad_scenario_names_key_and_line(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("version: 1\nhosts: many\nreclaims: {policy: nuke}\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    problems = [p.replace(str(path), "F") for p in info.value.problems]
    assert "hosts: expected an integer from 1 to 1e+06, got 'many' (F line 2)" in problems
    assert "reclaims.policy: expected one of requeue, kill, wait, got 'nuke' (F line 3)" in problems
