"""The lease checker's reading of the probes' records (no cluster): a pid used again by a
later probe of the same lease and host is two components, not one that ran on, and a
component that ran on is an overlap with every later one."""

from __future__ import annotations

from pathlib import Path

from tests.integration.lease_checker import Interval, intervals, violations
from tests.integration.singleton_probe import TICK, open_record, pid_of


def _record(folder: Path, name: str, lines: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / name).open("a") as out:
        out.write("".join(f"{line}\n" for line in lines))


def test_a_pid_used_again_is_two_intervals(tmp_path: Path) -> None:
    # What a long run on a busy machine wrote: h1's probe 6556 (token 20) stopped at 1300.0;
    # h0 ran token 21; the pid space went round and a later h1 probe of the same lease got
    # pid 6556 again and appended to the file.
    lease = tmp_path / "lease-3"
    _record(lease, "h1-6556.rec", ["start 1298.276444 20 h1 6556", "tick 1299.5", "stop 1300.0"])
    _record(lease, "h0-6646.rec", ["start 1301.166916 21 h0 6646", "stop 1301.584343"])
    _record(lease, "h1-6556.rec", ["start 2080.0 300 h1 6556", "tick 2088.7", "stop 2088.776"])
    spans = intervals(tmp_path)["lease-3"]
    assert [(s.host, s.token) for s in spans] == [("h1", 20), ("h0", 21), ("h1", 300)]
    assert spans[0].end == 1300.0 + TICK and spans[0].stopped
    assert spans[2].start == 2080.0
    assert violations(spans) == []


def test_a_torn_start_line_is_no_interval(tmp_path: Path) -> None:
    _record(tmp_path / "lease-0", "h0-7.rec", ["start 5.0 3 h0 7", "tick 5.5", "start 9.0 4"])
    spans = intervals(tmp_path)["lease-0"]
    assert [(s.token, s.start, s.end) for s in spans] == [(3, 5.0, 5.5 + TICK)]


def test_a_component_that_ran_on_overlaps_every_later_one() -> None:
    def span(host: str, token: int, start: float, end: float) -> Interval:
        return Interval("lease-3", host, 100 + token, token, start, end, True)

    long = span("h1", 20, 0.0, 100.0)
    spans = [long, span("h0", 21, 3.0, 4.0), span("h2", 22, 10.0, 11.0), span("h0", 23, 200, 201)]
    found = violations(spans)
    assert found == [f"overlap: {long} and {spans[1]}", f"overlap: {long} and {spans[2]}"]


def test_a_probe_never_writes_into_the_record_of_an_earlier_process(tmp_path: Path) -> None:
    first = open_record(str(tmp_path), "lease-3", "h1", 6556)
    first.write("start 1.0 20 h1 6556\n")
    first.close()
    second = open_record(str(tmp_path), "lease-3", "h1", 6556)  # the same pid, later
    second.write("start 9.0 30 h1 6556\n")
    second.close()
    files = sorted((tmp_path / "lease-3").glob("h1-*.rec"))
    assert [f.name for f in files] == ["h1-6556.1.rec", "h1-6556.rec"]
    assert [pid_of(f) for f in files] == [6556, 6556]
    assert [f.read_text() for f in files] == ["start 9.0 30 h1 6556\n", "start 1.0 20 h1 6556\n"]
