"""The providers' notice formats, as documented, parsed into notices; everything else refused."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from xce_agent.notices import aws, azure, gce
from xce_agent.notices.observed import MetadataGarbage, Observed
from xce_agent.notices.watcher import Tracker
from xce_protocol.notices import (
    BadNotice,
    Impact,
    Notice,
    NoticeKind,
    NoticeState,
    notice_from_wire,
)


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


# --- AWS ------------------------------------------------------------------------------------


def test_aws_spot_instance_action_is_a_preemption_at_its_time() -> None:
    body = b'{"action": "terminate", "time": "2017-09-18T08:22:00Z"}'
    [obs] = aws.parse_spot(200, body)
    assert obs.kind is NoticeKind.PREEMPTION
    assert obs.deadline == ts("2017-09-18T08:22:00")
    assert obs.raw == body.decode()


@pytest.mark.parametrize("action", ["stop", "hibernate"])
def test_aws_spot_stop_and_hibernate_are_preemptions(action: str) -> None:
    body = json.dumps({"action": action, "time": "2017-09-18T08:22:00Z"}).encode()
    assert aws.parse_spot(200, body)[0].kind is NoticeKind.PREEMPTION


def test_aws_404_is_no_notice() -> None:
    page = b"<html><title>404 - Not Found</title></html>"
    assert aws.parse_spot(404, page) == []
    assert aws.parse_rebalance(404, page) == []
    assert aws.parse_scheduled(404, page) == []


def test_aws_rebalance_is_advice_without_deadline() -> None:
    [obs] = aws.parse_rebalance(200, b'{"noticeTime": "2020-10-27T08:22:00Z"}')
    assert obs.kind is NoticeKind.REBALANCE
    assert obs.deadline is None and obs.lead is None


SCHEDULED = [
    {
        "NotBefore": "21 Jan 2019 09:00:43 GMT",
        "Code": "system-reboot",
        "Description": "scheduled reboot",
        "EventId": "instance-event-0d59937288b749b32",
        "NotAfter": "21 Jan 2019 09:17:23 GMT",
        "State": "active",
    }
]


def test_aws_scheduled_reboot_is_maintenance_before_not_before() -> None:
    [obs] = aws.parse_scheduled(200, json.dumps(SCHEDULED).encode())
    assert obs.kind is NoticeKind.MAINTENANCE and obs.impact is Impact.REBOOT
    assert obs.event_id == "instance-event-0d59937288b749b32"
    assert obs.deadline == ts("2019-01-21T09:00:43")


def test_aws_scheduled_single_digit_day_uses_go_layout() -> None:
    event = {**SCHEDULED[0], "NotBefore": "2 Jan 2019 09:00:43 GMT"}
    assert aws.parse_scheduled(200, json.dumps([event]).encode())[0].deadline == ts(
        "2019-01-02T09:00:43"
    )


def test_aws_retirement_is_a_termination_and_canceled_events_are_over() -> None:
    events = [
        {**SCHEDULED[0], "Code": "instance-retirement", "EventId": "e-1"},
        {**SCHEDULED[0], "State": "canceled", "EventId": "e-2", "Description": "[Canceled] x"},
        {**SCHEDULED[0], "State": "completed", "EventId": "e-3"},
    ]
    found = aws.parse_scheduled(200, json.dumps(events).encode())
    assert [(o.event_id, o.kind) for o in found] == [("e-1", NoticeKind.TERMINATION)]
    assert aws.parse_scheduled(200, b"[]") == []


@pytest.mark.parametrize(
    ("parse", "status", "body"),
    [
        (aws.parse_spot, 200, b"not json"),
        (aws.parse_spot, 200, b'{"action": "reboot", "time": "2017-09-18T08:22:00Z"}'),
        (aws.parse_spot, 200, b'{"action": "terminate", "time": "18 Sep 2017"}'),
        (aws.parse_spot, 200, b'{"action": "terminate", "time": "2017-13-45T08:22:00Z"}'),
        (aws.parse_spot, 500, b""),
        (aws.parse_spot, 301, b""),
        (aws.parse_spot, 200, b"\xff\xfe"),
        (aws.parse_rebalance, 200, b'{"noticeTime": 5}'),
        (aws.parse_scheduled, 200, b'{"NotBefore": "x"}'),
        (aws.parse_scheduled, 200, json.dumps([{**SCHEDULED[0], "NotBefore": "soon"}]).encode()),
        (aws.parse_scheduled, 200, b"[[[[[]]]]]"),
    ],
)
def test_aws_garbage_is_refused(parse: object, status: int, body: bytes) -> None:
    assert callable(parse)
    with pytest.raises(MetadataGarbage):
        parse(status, body)


def test_aws_token_ttl_from_the_answer_or_as_asked() -> None:
    assert aws.token_ttl("21600") == 21600
    assert aws.token_ttl(None) == aws.TOKEN_TTL
    assert aws.token_ttl("0") == aws.TOKEN_TTL
    assert aws.token_ttl("lots") == aws.TOKEN_TTL


# --- GCE ------------------------------------------------------------------------------------


def test_gce_preempted_true_is_a_preemption_within_30_seconds() -> None:
    assert gce.parse_preempted("FALSE") == []
    [obs] = gce.parse_preempted(gce.value_of(200, "Google", b"TRUE", gce.PREEMPTED_KEY))
    assert obs.kind is NoticeKind.PREEMPTION and obs.lead == 30.0


def test_gce_maintenance_migrate_pauses_terminate_reboots() -> None:
    assert gce.parse_maintenance("NONE") == []
    [migrate] = gce.parse_maintenance("MIGRATE_ON_HOST_MAINTENANCE")
    [terminate] = gce.parse_maintenance("TERMINATE_ON_HOST_MAINTENANCE")
    assert migrate.impact is Impact.PAUSE and migrate.lead == 60.0
    assert terminate.impact is Impact.REBOOT and terminate.kind is NoticeKind.MAINTENANCE


@pytest.mark.parametrize(
    ("status", "flavor", "body"),
    [
        (503, "Google", b"TRUE"),
        (200, None, b"TRUE"),  # not the metadata server speaking (a proxy, a portal)
        (200, "google", b"TRUE"),
        (200, "Google", b"<html>TRUE</html>"),
        (200, "Google", b"T" * 300),
    ],
)
def test_gce_answers_that_are_not_the_metadata_server_are_refused(
    status: int, flavor: str | None, body: bytes
) -> None:
    with pytest.raises(MetadataGarbage):
        gce.value_of(status, flavor, body, gce.PREEMPTED_KEY)


def test_gce_preempted_acts_only_on_true() -> None:
    with pytest.raises(MetadataGarbage):
        gce.parse_preempted("MAYBE")


# --- Azure ----------------------------------------------------------------------------------

AZURE_EVENT = {
    "EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
    "EventStatus": "Scheduled",
    "EventType": "Freeze",
    "ResourceType": "VirtualMachine",
    "Resources": ["WestNO_0", "WestNO_1"],
    "NotBefore": "Mon, 11 Apr 2026 22:26:58 GMT",
    "Description": "Virtual machine is being paused because of a memory-preserving Live Migration.",
    "EventSource": "Platform",
    "DurationInSeconds": 5,
}


def doc(*events: dict[str, object], incarnation: int = 2) -> bytes:
    return json.dumps({"DocumentIncarnation": incarnation, "Events": list(events)}).encode()


@pytest.mark.parametrize(
    ("event_type", "kind", "impact"),
    [
        ("Preempt", NoticeKind.PREEMPTION, Impact.REBOOT),
        ("Terminate", NoticeKind.TERMINATION, Impact.REBOOT),
        ("Reboot", NoticeKind.MAINTENANCE, Impact.REBOOT),
        ("Redeploy", NoticeKind.MAINTENANCE, Impact.REBOOT),
        ("Freeze", NoticeKind.MAINTENANCE, Impact.PAUSE),
    ],
)
def test_azure_event_types(event_type: str, kind: NoticeKind, impact: Impact) -> None:
    [obs] = azure.parse_events(200, doc({**AZURE_EVENT, "EventType": event_type}), "WestNO_0")
    assert (obs.kind, obs.impact) == (kind, impact)
    assert obs.deadline == ts("2026-04-11T22:26:58")
    assert obs.event_id == AZURE_EVENT["EventId"]


def test_azure_events_for_other_vms_are_skipped_and_empty_means_none() -> None:
    assert azure.parse_events(200, doc(AZURE_EVENT), "WestNO_7") == []
    assert len(azure.parse_events(200, doc(AZURE_EVENT), "")) == 1  # name unknown: take all
    assert azure.parse_events(200, doc(), "WestNO_0") == []


def test_azure_started_event_has_no_not_before_and_is_under_way() -> None:
    started = {**AZURE_EVENT, "EventStatus": "Started", "NotBefore": ""}
    [obs] = azure.parse_events(200, doc(started), "WestNO_0")
    assert obs.deadline is None and obs.lead == 0.0


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, b'{"error": "Bad request"}'),
        (200, b"[]"),
        (200, b'{"Events": []}'),
        (200, b'{"DocumentIncarnation": "2", "Events": []}'),
        (200, doc({**AZURE_EVENT, "EventType": "Explode"})),
        (200, doc({**AZURE_EVENT, "NotBefore": "2026-04-11T22:26:58Z"})),
        (200, doc({**AZURE_EVENT, "NotBefore": ""})),  # Scheduled events have a time
        (200, doc({**AZURE_EVENT, "EventStatus": "Completed"})),
        (200, doc({**AZURE_EVENT, "Resources": "WestNO_0"})),
    ],
)
def test_azure_garbage_is_refused(status: int, body: bytes) -> None:
    with pytest.raises(MetadataGarbage):
        azure.parse_events(status, body, "WestNO_0")


def test_azure_start_requests_body() -> None:
    assert json.loads(azure.start_requests(["a", "b"])) == {
        "StartRequests": [{"EventId": "a"}, {"EventId": "b"}]
    }


# --- tracking -------------------------------------------------------------------------------


def test_tracker_reports_new_changed_and_ended_notices_once() -> None:
    tracker = Tracker("gce")
    obs = gce.parse_preempted("TRUE")
    [first] = tracker.update("preempted", obs, now=1000.0)
    assert first.deadline == 1030.0 and first.state is NoticeState.ACTIVE
    assert tracker.update("preempted", obs, now=1010.0) == []  # re-read: not news, same time
    assert tracker.update("preempted", [], now=1015.0) == []  # one answer without it: not yet
    [ended] = tracker.update("preempted", [], now=1020.0)
    assert ended.state is NoticeState.ENDED and ended.event_id == "gce-preempted"
    assert tracker.update("preempted", [], now=1021.0) == []
    tracker.update("preempted", obs, now=1030.0)
    [ended] = tracker.update("preempted", [], now=1031.0, end_after=1)  # a long-poll's word
    assert ended.state is NoticeState.ENDED


def test_tracker_an_event_missing_from_one_answer_only_is_not_over() -> None:
    tracker = Tracker("aws")
    spot = [Observed("aws-spot", NoticeKind.PREEMPTION, "x", deadline=5.0)]
    tracker.update("spot", spot, 1.0)
    for now in (2.0, 4.0, 6.0):  # flapping: gone, back, gone, back
        assert tracker.update("spot", [], now) == []
        assert tracker.update("spot", spot, now + 1) == []
    assert [n.event_id for n in tracker.active()] == ["aws-spot"]
    assert tracker.update("spot", [], 8.0) == []
    assert [n.state for n in tracker.update("spot", [], 9.0)] == [NoticeState.ENDED]
    assert tracker.active() == []


def test_tracker_keeps_a_scheduled_time_once_the_event_started() -> None:
    tracker = Tracker("azure")
    sched = azure.parse_events(200, doc(AZURE_EVENT), "")
    started = azure.parse_events(
        200, doc({**AZURE_EVENT, "EventStatus": "Started", "NotBefore": ""}), ""
    )
    [one] = tracker.update("events", sched, now=ts("2026-04-11T22:00:00"))
    [now_started] = tracker.update("events", started, now=ts("2026-04-11T22:27:00"))
    assert now_started.deadline == one.deadline == ts("2026-04-11T22:26:58")
    assert '"Started"' in now_started.raw
    assert tracker.active() == [now_started]


def test_tracker_sources_are_independent() -> None:
    tracker = Tracker("aws")
    tracker.update("spot", [Observed("aws-spot", NoticeKind.PREEMPTION, "x", deadline=5.0)], 1.0)
    assert tracker.update("rebalance", [], 2.0) == []
    assert [n.event_id for n in tracker.active()] == ["aws-spot"]


# --- wire -----------------------------------------------------------------------------------


def test_notice_round_trips_on_the_wire() -> None:
    notice = Notice(NoticeKind.MAINTENANCE, "aws", "e-1", 1.7e9, impact=Impact.PAUSE, raw="{}")
    assert notice_from_wire(json.loads(json.dumps(notice.to_wire()))) == notice


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "a notice is a JSON object"),
        ({}, "kind: expected one of preemption"),
        ({"kind": "explosion"}, "kind: expected one of"),
        ({"kind": "shutdown", "deadline": float("nan")}, "deadline:"),
        ({"kind": "shutdown", "deadline": float("inf")}, "deadline:"),
        ({"kind": "shutdown", "deadline": True}, "deadline:"),
        ({"kind": "shutdown", "deadline": "soon"}, "deadline:"),
        ({"kind": "shutdown", "state": "maybe"}, "state:"),
        ({"kind": "shutdown", "event_id": "x" * 300}, "event_id:"),
        ({"kind": "shutdown", "raw": {"a": 1}}, "raw:"),
    ],
)
def test_bad_notice_bodies_say_which_field(body: object, message: str) -> None:
    with pytest.raises(BadNotice, match=message):
        notice_from_wire(body)


# --- one bad event among good ones; nesting; approval -----------------------------------------


def test_azure_unknown_or_malformed_event_is_skipped_not_the_whole_document() -> None:
    preempt = {**AZURE_EVENT, "EventId": "P", "EventType": "Preempt", "Resources": ["WestNO_0"]}
    bad_events: list[object] = [{**AZURE_EVENT, "EventType": "Hibernate"}, {"EventId": 7}, "x"]
    for bad in bad_events:
        body = json.dumps({"DocumentIncarnation": 2, "Events": [bad, preempt]}).encode()
        with pytest.raises(MetadataGarbage, match="event skipped") as caught:
            azure.parse_events(200, body, "WestNO_0")
        assert [o.event_id for o in caught.value.observed or []] == ["P"]


@pytest.mark.parametrize(
    ("resources", "vm_name", "approvable"),
    [
        (["WestNO_0"], "WestNO_0", True),
        (["WestNO_0", "WestNO_1"], "WestNO_0", False),
        (["WestNO_1"], "", False),
    ],
)
def test_azure_only_an_event_for_this_vm_alone_may_be_approved(
    resources: list[str], vm_name: str, approvable: bool
) -> None:
    [obs] = azure.parse_events(200, doc({**AZURE_EVENT, "Resources": resources}), vm_name)
    assert obs.approvable is approvable


def test_aws_scheduled_bad_event_does_not_hide_a_retirement() -> None:
    good = {
        "NotBefore": "21 Jan 2019 09:00:43 GMT",
        "Code": "instance-retirement",
        "EventId": "instance-event-1",
        "State": "active",
    }
    bad = {**good, "EventId": "instance-event-2", "NotBefore": "tomorrow"}
    with pytest.raises(MetadataGarbage, match="event skipped") as caught:
        aws.parse_scheduled(200, json.dumps([bad, good]).encode())
    [obs] = caught.value.observed or []
    assert (obs.event_id, obs.kind) == ("instance-event-1", NoticeKind.TERMINATION)


@pytest.mark.parametrize("parse", [aws.parse_spot, aws.parse_scheduled])
def test_json_nested_too_deep_is_garbage_not_a_crash(parse: object) -> None:
    deep = b"[" * 50000 + b"]" * 50000
    with pytest.raises(MetadataGarbage, match="not JSON"):
        parse(200, deep)  # type: ignore[operator]
    with pytest.raises(MetadataGarbage, match="not JSON"):
        azure.parse_events(200, b'{"Events": ' + b"[" * 30000 + b"]" * 30000 + b"}", "vm0")


def test_tracker_an_event_id_listed_twice_is_taken_at_its_most_severe() -> None:
    freeze = {**AZURE_EVENT, "EventId": "DUP", "Resources": ["WestNO_0"]}
    preempt = {**freeze, "EventType": "Preempt"}
    for events in ((freeze, preempt), (preempt, freeze)):
        observed = azure.parse_events(200, doc(*events), "WestNO_0")
        [notice] = Tracker("azure").update("events", observed, 1.0)
        assert (notice.event_id, notice.kind) == ("DUP", NoticeKind.PREEMPTION)


def test_notice_text_fields_arrive_printable() -> None:
    got = notice_from_wire({"kind": "preemption", "provider": "a\x1bb", "event_id": "e\nf"})
    assert (got.provider, got.event_id) == ("a?b", "e?f")
