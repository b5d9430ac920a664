"""xcecli's tables: times carry their date once they are more than a day away."""

from __future__ import annotations

import time
from typing import Any

from xce_controller.cli.text import when as _when


def test_times_within_a_day_show_the_time_older_ones_the_date_too() -> None:
    now = time.mktime((2026, 12, 1, 12, 0, 0, 0, 0, -1))
    assert _when(now - 3600, now) == "11:00:00"
    assert _when(now - 2 * 86400, now) == "2026-11-29 12:00:00"
    assert _when(None, now) == "-"


def test_to_return_shows_the_agents_last_report() -> None:
    """Before: the table had no word of it, though the README promises it."""
    from xce_controller.cli.host_views import return_rows as _return_rows

    host: dict[str, Any] = {
        "instance_id": "i-1", "name": "n1", "expected_name": "", "expected_address": "",
        "notice": None, "state": "decommissioned", "reason": "scale in", "history": [],
        "report": {"agent_state": "decommissioned", "at": time.time(),
                   "components": [{"name": "worker", "state": "stopped"}]},
    }  # fmt: skip
    text = _return_rows([host])
    assert "LAST REPORT" in text and "decommissioned, worker stopped at" in text
    assert "-" in _return_rows([{**host, "report": None}])
