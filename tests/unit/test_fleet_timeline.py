"""The fleet's last hours told from the hosts' histories (core/fleet.py), and drawn as SVG
(http/ui_chart.py): counts at each step, marks in the step they began, the past left out."""

from __future__ import annotations

import re
from dataclasses import replace

from xce_controller.core.fleet import fleet_timeline
from xce_controller.core.model import Change, Host, HostNotice, HostState
from xce_controller.http.ui_chart import fleet_svg

NOW = 1_800_000_000.0
S = HostState


def host(name: str, *changes: tuple[float, HostState, str]) -> Host:
    history = tuple(Change(NOW + at, state, "x", "why", code) for at, state, code in changes)
    return Host(f"host:{name}", history[-1].state, "default", name=name, history=history)


def test_counts_follow_each_hosts_changes_step_by_step() -> None:
    hosts = [
        host("a", (-7200, S.EXPECTED, ""), (-4000, S.OPEN, "joined")),  # before the window
        host("b", (-1800, S.EXPECTED, ""), (-1700, S.OPEN, "joined")),
        host("c", (-500, S.OPEN, "joined"), (-200, S.DRAINING, "decommission_requested")),
    ]
    t = fleet_timeline(hosts, NOW, window=3600, steps=6)  # 10-minute steps
    assert t.start == NOW - 3600 and t.end == NOW
    # A change counts from the first sample after it: b joined at -1700, in the fourth step.
    assert t.counts["open"] == (1, 1, 1, 1, 2, 2, 2)
    assert t.counts["expected"] == (0, 0, 0, 0, 0, 0, 0)  # b entered and left in one step
    assert t.counts["draining"] == (0, 0, 0, 0, 0, 0, 1)
    assert t.marks["drains"] == (0, 0, 0, 0, 0, 1)


def test_the_past_and_the_future_are_left_out() -> None:
    hosts = [
        host("gone", (-9000, S.OPEN, ""), (-8000, S.DECOMMISSIONED, "drained")),
        host("left", (-600, S.OPEN, ""), (-300, S.DECOMMISSIONED, "drained")),
        host("later", (60, S.OPEN, "")),  # a clock read after `now`
    ]
    t = fleet_timeline(hosts, NOW, window=3600, steps=12)
    assert all(n == 0 for counts in t.counts.values() for n in counts[:-3])
    assert t.counts["open"][-3:] == (0, 1, 0)
    assert "decommissioned" not in t.counts and "returned" not in t.counts


def test_losses_and_notices_are_marked_in_the_step_they_began() -> None:
    preempted = host(
        "p", (-5000, S.OPEN, ""), (-1500, S.CLOSED, "notice_preemption"), (-100, S.LOST, "")
    )
    warned = replace(
        host("w", (-5000, S.OPEN, "")),
        notice=HostNotice("maintenance", "gce", "e1", None, "reboot", NOW - 2000),
    )
    reopened = host("r", (-5000, S.CLOSED, "notice_rebalance"), (-900, S.OPEN, "notice_lapsed"))
    t = fleet_timeline([preempted, warned, reopened], NOW, window=3600, steps=6)
    assert t.marks["notices"] == (0, 0, 1, 1, 0, 0)  # the lapse is no notice
    assert t.marks["losses"] == (0, 0, 0, 0, 0, 1)
    assert t.counts["lost"][-1] == 1 and t.counts["closed"] == (1, 1, 1, 1, 2, 1, 0)


def test_the_svg_draws_bands_for_live_states_and_a_lane_per_mark() -> None:
    hosts = [host(f"n{i}", (-3000 + i, S.OPEN, "")) for i in range(30)]
    hosts.append(host("l", (-3000, S.OPEN, ""), (-60, S.LOST, "heartbeat_lost")))
    svg = fleet_svg(fleet_timeline(hosts, NOW, window=3600, steps=60))
    assert svg.startswith("<svg id=fleet") and svg.endswith("</svg>")
    assert re.findall(r'data-state="(\w+)" data-now="(\d+)"', svg) == [
        ("open", "30"),
        ("lost", "1"),
    ]
    assert re.findall(r'data-lane="(\w+)" data-total="(\d+)"', svg) == [
        ("drains", "0"),
        ("losses", "1"),
        ("notices", "0"),
    ]
    assert 'aria-label="Live hosts by state over the last hour: now 30 open, 1 lost"' in svg
    assert "style=" not in svg  # the page's policy allows no inline style
    assert svg.count("<title>") == 3  # two bands, one bar


def test_an_empty_fleet_still_draws_its_axes() -> None:
    svg = fleet_svg(fleet_timeline([], NOW, window=6 * 3600, steps=120))
    assert "no live hosts" in svg and "<polygon" not in svg and "hosts</text>" in svg
