"""The spot scenario: the same interruptions lose work without notices and none with them."""

from __future__ import annotations

from xce_controller.sim.spot import SpotScenario, render, run_spot


def test_notices_turn_lost_jobs_into_jobs_requeued_in_time() -> None:
    spec = SpotScenario(hosts=20, slots=2, hours=2.0, interruptions_per_host_hour=0.5)
    without, with_ = run_spot(spec)
    assert without.interruptions == with_.interruptions > 0  # the same interruptions
    lost = without.jobs["lost (running when the instance went)"]
    assert lost > 0 and without.lost_work_hours > 0
    assert without.jobs["requeued after the host-loss grace"] == lost
    assert min(without.requeue_delays) >= spec_grace()  # learnt only after the grace
    assert with_.jobs["lost (running when the instance went)"] == 0
    assert with_.lost_work_hours == 0
    assert with_.jobs["requeued in time (before the instance went)"] > 0
    assert with_.jobs["requeued after the host-loss grace"] == 0
    text = render(spec, without, with_)
    assert "without notices" in text and "lost work (job-hours)" in text


def test_without_interruptions_both_runs_agree() -> None:
    spec = SpotScenario(hosts=5, slots=1, hours=1.0, interruptions_per_host_hour=0.0)
    without, with_ = run_spot(spec)
    assert without.jobs == with_.jobs and set(without.jobs) == {"finished"}


def spec_grace() -> float:
    from xce_controller.sim.spot import spot_cluster

    return spot_cluster(1).host_loss_grace
