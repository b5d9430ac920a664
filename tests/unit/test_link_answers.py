"""What the link takes from an answer, whatever the controller put in it."""

from __future__ import annotations

import math
from typing import Any

import pytest

from xce_agent.core import membership as ms
from xce_agent.core.answers import labelled, notice_events, unknown, version_of
from xce_protocol.protocol import Answer, Outcome


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (7, 7),
        (0, 0),
        (True, None),
        (False, None),
        (-1, None),
        (1.0, None),
        ("3", None),
        (math.nan, None),
        (None, None),
        (2**70, 2**70),
    ],
)
def test_a_version_is_a_non_negative_int_and_never_a_bool(value: Any, expected: Any) -> None:
    assert version_of({"version": value}) == expected


def test_no_version_is_none() -> None:
    assert version_of({}) is None


def test_a_notice_is_held_then_drained() -> None:
    body = {"notice": {"event_id": "e-1", "kind": "spot", "drained": True}}
    assert notice_events(body) == [ms.NoticeHeld("e-1", "spot"), ms.NoticeDrained("e-1")]


@pytest.mark.parametrize(
    "notice",
    [None, [], "e-1", {"event_id": ""}, {"event_id": 5, "drained": True}, {"kind": "spot"}],
)
def test_a_notice_without_a_usable_event_id_means_nothing(notice: Any) -> None:
    assert notice_events({"notice": notice}) == []


def test_drained_must_be_true_itself() -> None:
    body = {"notice": {"event_id": "e-1", "drained": "yes"}}
    assert notice_events(body) == []


def test_only_a_refusal_that_names_an_unknown_host_or_credential_means_join_again() -> None:
    assert unknown(Answer(Outcome.REFUSED, "x", {"error": "unknown_host"}))
    assert unknown(Answer(Outcome.REFUSED, "401 unknown_credential", {}))
    assert not unknown(Answer(Outcome.REFUSED, "x", {"error": "forbidden"}))
    assert not unknown(Answer(Outcome.RETRY, "unknown_host", {}))
    # A body that names another error wins over a detail that mentions one.
    assert not unknown(Answer(Outcome.REFUSED, "unknown_host", {"error": "bad_token"}))


def test_a_refusal_says_which_credential_failed() -> None:
    refused = labelled(Answer(Outcome.REFUSED, "401 bad token"), "join token")
    assert refused.detail == "join token refused: 401 bad token"
    assert labelled(Answer(Outcome.RETRY, "timeout"), "join token").detail == "timeout"
