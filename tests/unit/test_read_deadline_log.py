"""The read deadline's log under a flood: one line now and then, and every connection closed
is told within LOG_EVERY, the last of a flood included."""

from __future__ import annotations

import asyncio
import logging

import pytest

from xce_controller.http import read_deadline


def test_a_flood_is_one_line_now_and_its_rest_a_line_soon_after(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(read_deadline, "LOG_EVERY", 0.2)
    closed = read_deadline._Closed()

    async def flood() -> None:
        for port in range(400):
            closed.note(("192.0.2.7", port), 30.0)
        await asyncio.sleep(0.5)  # the flood is over: nothing more comes

    with caplog.at_level(logging.WARNING, logger="xce_controller.http.read_deadline"):
        asyncio.run(flood())
    lines = [r.getMessage() for r in caplog.records]
    assert closed.total == 400
    assert lines == [
        "closed 1 connection(s) whose request did not arrive within 30s (last from 192.0.2.7)",
        "closed 399 connection(s) whose request did not arrive within 30s (last from 192.0.2.7)",
    ]
