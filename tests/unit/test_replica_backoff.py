"""The wait between tries of a change overtaken by another replica: none at first, then a
doubling bound, capped, so a request gives up (503) within a few seconds at worst."""

from __future__ import annotations

import asyncio
import json

from xce_controller.http import replicas


def test_the_first_tries_run_again_at_once_then_wait_a_doubling_capped_bound() -> None:
    bounds = [replicas.backoff(n) for n in range(replicas.RETRIES + 1)]
    assert bounds[: replicas.IMMEDIATE] == [0.0] * replicas.IMMEDIATE
    later = bounds[replicas.IMMEDIATE :]
    assert later[0] == replicas.BACKOFF_FIRST
    assert all(b <= replicas.BACKOFF_MAX for b in later)
    assert all(a <= b for a, b in zip(later, later[1:]))
    assert later[-1] == replicas.BACKOFF_MAX
    assert sum(bounds) < 5.0  # the longest a request waits in all before its 503


def test_the_busy_answer_says_its_length_so_a_plain_client_reads_the_next_answer() -> None:
    """Without a length the server sent it chunked; the bench's client took the chunk for
    the next answer's status line (IndexError) after the first 503 of a racing write burst."""
    sent: list[dict[str, object]] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    asyncio.run(replicas._busy(send))  # type: ignore[arg-type]
    start, body = sent
    headers = dict(start["headers"])  # type: ignore[call-overload]
    assert start["status"] == 503
    assert int(headers[b"content-length"]) == len(body["body"])  # type: ignore[arg-type]
    assert json.loads(body["body"])["code"] == "refused_storage_unavailable"  # type: ignore[arg-type]
