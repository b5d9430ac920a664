"""The reason-code catalogue: documented exactly, stable in form, refusals mapped."""

from __future__ import annotations

import re
from pathlib import Path

from xce_protocol.reasons import Reason, parse, refusal

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def test_every_code_is_documented_and_nothing_else() -> None:
    text = DOC.read_text()
    table = text.split("<!-- reason-codes:", 1)[1]
    documented = re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE)
    assert documented == [r.value for r in Reason]


def test_codes_are_lowercase_words() -> None:
    for reason in Reason:
        assert re.fullmatch(r"[a-z][a-z_]{2,63}", reason.value), reason
        assert reason.name.lower() == reason.value


def test_refusal_kinds_map_to_codes() -> None:
    assert refusal("decommissioned") is Reason.REFUSED_DECOMMISSIONED
    assert refusal("storage_unavailable") is Reason.REFUSED_STORAGE_UNAVAILABLE
    assert refusal("something_new") is Reason.REFUSED_OTHER


def test_codes_read_back_from_a_peer() -> None:
    assert parse("worker_fatal") == "worker_fatal"
    assert parse("a_code_from_a_newer_peer") == "a_code_from_a_newer_peer"
    for bad in ("", "Worker", "x" * 65, "a b", None, 3, "drop;table"):
        assert parse(bad) == ""
