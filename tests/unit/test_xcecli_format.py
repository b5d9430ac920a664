"""xcecli's tables: times carry their date once they are more than a day away."""

from __future__ import annotations

import time

from xce_controller.cli.text import when as _when


def test_times_within_a_day_show_the_time_older_ones_the_date_too() -> None:
    now = time.mktime((2026, 12, 1, 12, 0, 0, 0, 0, -1))
    assert _when(now - 3600, now) == "11:00:00"
    assert _when(now - 2 * 86400, now) == "2026-11-29 12:00:00"
    assert _when(None, now) == "-"
