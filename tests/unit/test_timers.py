"""Per-host due times: the earliest live one first, superseded ones never fire."""

from __future__ import annotations

from xce_controller.core.timers import Timers


def test_latest_set_wins_and_each_host_fires_once() -> None:
    t = Timers()
    t.set("a", 10.0)
    t.set("b", 5.0)
    t.set("a", 3.0)  # moved earlier
    t.set("b", 20.0)  # moved later: the old 5.0 entry must not fire
    assert t.next() == 3.0
    assert t.pop_due(9.0) == ["a"]
    assert t.next() == 20.0 and t.pop_due(19.9) == []
    t.set("c", None)
    assert t.pop_due(100.0) == ["b"] and t.next() is None and len(t) == 0


def test_stale_entries_are_compacted() -> None:
    t = Timers()
    for k in range(10_000):
        t.set("a", float(k))
    assert len(t._heap) < 200 and t.next() == 9999.0
