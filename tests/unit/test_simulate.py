"""The simulator drives the live lifecycle in virtual time and reports what happened."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from xce_agent.errors import ConfigError
from xce_controller.core import deadlines
from xce_controller.core import lifecycle as lc
from xce_controller.core.model import HostState
from xce_controller.sim.report import Summary
from xce_controller.sim.scenario import load_scenario
from xce_controller.sim.simulate import run_scenario

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
    assert "hosts                             200 over 6.0 virtual hours" in text


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
    assert "hosts: expected an integer from 1 to 1000000, got 'many' (F line 2)" in problems
    assert "reclaims.policy: expected one of requeue, kill, wait, got 'nuke' (F line 3)" in problems


FAULTS = """\
version: 1
hosts: 300
duration: 8h
seed: 5
join_delay: {distribution: uniform, min: 10s, max: 1m}
spot_loss_per_hour: 0.02
returns_after_loss: {share: 0.5, after: {distribution: fixed, mean: 2m}}
spot_notices: {per_host_hour: 0.01, lead: 2m}
reclaims: {count: 60, start: 1h, end: 7h, drain_timeout: 5m, policy: wait}
restarts: {count: 3, downtime: 10m}
jobs: {per_host: 1, duration: {distribution: exponential, mean: 3h}}
return_delay: 5m
stuck_after: 1h
"""


def _faults(tmp_path: Path, text: str = FAULTS) -> Summary:
    path = tmp_path / "faults.yaml"
    path.write_text(text)
    return run_scenario(load_scenario(path))


def test_controller_restarts_do_not_make_hosts_lost_or_jobs_run_twice(tmp_path: Path) -> None:
    summary = _faults(tmp_path)
    assert summary.restarts == 3
    assert summary.lost_alive == 0
    # Jobs run twice only where a partitioned host was rightly taken for lost and came back.
    partition_only = summary.jobs.get("run twice", 0)
    text = summary.render()
    assert "controller restarts               3" in text
    assert "hosts taken for lost while alive  0" in text
    assert summary.forgotten == 0
    assert partition_only < summary.jobs["requeued"]


def test_the_simulator_finds_downtime_read_as_silence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The defect the live controller had, put back: downtime counted against hosts."""
    fixed = _faults(tmp_path)
    monkeypatch.setattr(
        deadlines,
        "heard_from",
        lambda host, last_seen, alive_since: last_seen or host.joined_at or 0.0,
    )
    broken = _faults(tmp_path)
    assert broken.lost_alive > 100  # most hosts, at every restart
    assert broken.jobs["run twice"] > fixed.jobs.get("run twice", 0) + 100


def test_the_simulator_finds_a_forgotten_decommission(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The defect put back: a lost draining host heard again became open."""
    text = FAULTS.replace("count: 60", "count: 150").replace("mean: 3h", "mean: 12h")
    assert _faults(tmp_path, text).forgotten == 0
    monkeypatch.setattr(lc, "returned_state", lambda host: HostState.OPEN)
    broken = _faults(tmp_path, text)
    assert broken.forgotten > 0
    assert f"decommissions forgotten           {broken.forgotten}" in broken.render()


def test_stuck_hosts_and_reclaims_that_could_not_happen_are_named(tmp_path: Path) -> None:
    text = FAULTS.replace("count: 60", "count: 400").replace("mean: 3h", "mean: 48h")
    summary = _faults(tmp_path, text)
    draining = summary.stuck["draining"]  # policy wait on two-day jobs
    assert draining.count > 0 and draining.longest > 3600
    assert summary.missed.get("reclaim: no open host found", 0) > 0  # 400 reclaims, 300 hosts
    text = summary.render()
    assert "reclaim: no open host found" in text
    assert "stuck draining" in text and "decommission requested: reclaimed by provider" in text


def test_plot_draws_hosts_by_state_and_jobs_by_outcome(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot is an optional extra (matplotlib)")
    from xce_controller.sim.report import plot

    summary = _faults(tmp_path)
    out = tmp_path / "plot.png"
    plot(summary, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert len(summary.series.times) > 200 and "open" in summary.series.hosts


SPOT = """\
version: 1
hosts: 200
duration: 6h
seed: 3
join_delay: {distribution: fixed, mean: 10s}
spot_notices: {per_host_hour: 0.05, lead: 2m, handling: HANDLING}
jobs: {per_host: 1, duration: {distribution: exponential, mean: 3h}}
"""


def test_spot_notices_handled_by_the_agent_requeue_in_time(tmp_path: Path) -> None:
    heard = _faults(tmp_path, SPOT.replace("HANDLING", "notice"))
    ignored = _faults(tmp_path, SPOT.replace("HANDLING", "none"))
    assert heard.jobs.get("requeued on notice", 0) > 0
    assert heard.jobs.get("requeued after loss", 0) == 0  # none was running when it went
    assert ignored.jobs.get("requeued after loss", 0) > 0
    assert ignored.jobs.get("requeued on notice", 0) == 0
    assert "requeued on notice" in heard.render()


def test_unknown_notice_handling_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SPOT.replace("HANDLING", "pray"))
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert any(
        "spot_notices.handling: expected one of decommission, notice, none" in p
        for p in info.value.problems
    )


def test_the_simulator_finds_drain_timeouts_that_passed_during_downtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs that finished while the controller was down are reported after the restart; a
    drain timeout that passed meanwhile must not requeue them first (they would run twice)."""
    text = (
        FAULTS.replace("policy: wait", "policy: requeue")
        .replace("count: 60", "count: 200")
        .replace("drain_timeout: 5m", "drain_timeout: 9m")  # many drains span a downtime
        .replace("mean: 3h", "mean: 15m")
    )
    fixed = _faults(tmp_path, text)
    monkeypatch.setattr(
        deadlines,
        "drain_deadline",
        lambda host, cfg, alive_since: host.drain.deadline if host.drain else None,
    )
    broken = _faults(tmp_path, text)
    assert broken.jobs["run twice"] > fixed.jobs.get("run twice", 0) + 5
