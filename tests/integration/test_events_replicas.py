"""`xcecli events` and `xcecli why` through a replica whose database's answers no longer come
(test_commit_outcome's proxy, muted: a partition that drops the packets). The replica answers
`/v1/events` 503 before any of the stream, as `/v1/leases` does, so `xcecli` goes on to the
next URL and prints every event once; before, it answered 200 and broke the stream off, and
`xcecli` stopped there (exit 3) without trying the healthy replica."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.test_outcome_unknown_replicas import proxied_pair
from tests.pg_server import PgCluster
from tests.unit.test_error_exits import _runner
from xce_controller.cli.xcecli import main as xcecli_main
from xce_controller.http.server import EmbeddedController

CONFIG = """\
version: 1
auth: {admin_token: adm1n-t0ken, join_token: j0in-t0ken}
templates:
  default: {slots: 1}
"""
ADMIN = {"Authorization": "Bearer adm1n-t0ken"}
REFUSED = 'xce_controller_refusals_total{code="refused_storage_unavailable",endpoint="/v1/events"}'


@pytest.fixture
def cut(tmp_path: Path, pg: PgCluster) -> Iterator[tuple[EmbeddedController, EmbeddedController]]:
    """Two replicas: the first reaches the database through a proxy that `mute` cuts, the
    second directly."""
    with proxied_pair(tmp_path, pg, CONFIG) as (first, second, proxy, _):
        join = {"host": "pd0", "boot_id": "b1"}
        headers = {"Authorization": "Bearer j0in-t0ken"}
        assert requests.post(f"{second.url}/v1/join", json=join, headers=headers, timeout=30).ok
        for n in range(3):
            body = {"instance_id": f"i-{n}", "template": "default"}
            made = requests.post(f"{second.url}/v1/expected", json=body, headers=ADMIN, timeout=30)
            assert made.ok, made.text
        proxy.muted.set()  # from now on the first replica's database never answers
        yield first, second


def _refusals(url: str) -> float:
    """The first replica's count of /v1/events answered 503 (its metrics answer from memory
    while the database is away)."""
    text = requests.get(f"{url}/metrics", headers=ADMIN, timeout=10).text
    lines = [line for line in text.splitlines() if line.startswith(REFUSED)]
    return float(lines[0].split()[-1]) if lines else 0.0


def test_events_and_why_through_a_replica_cut_from_its_database_go_on_to_the_next(
    cut: tuple[EmbeddedController, EmbeddedController],
) -> None:
    first, second = cut
    # The replica itself: a 503 with the storage problem document, not a 200 broken off.
    answer = requests.get(f"{first.url}/v1/events", headers=ADMIN, timeout=30)
    assert answer.status_code == 503, answer.text[:200]
    assert answer.json()["error"] == "storage_unavailable"
    assert _refusals(first.url) == 1
    urls = ["--url", f"{first.url},{second.url}", "--token", "adm1n-t0ken"]
    listed = _runner().invoke(xcecli_main, [*urls, "events", "--json"])
    assert listed.exit_code == 0, listed.output
    seqs = [json.loads(line)["seq"] for line in listed.output.splitlines()]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 4, seqs  # all, once each
    assert _refusals(first.url) == 2  # the request did arrive at the first replica
    told = _runner().invoke(xcecli_main, [*urls, "why", "pd0"])
    assert told.exit_code == 0, told.output
    assert "pd0" in told.output and "joined" in told.output, told.output
    assert _refusals(first.url) == 3
