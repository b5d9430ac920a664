"""AWS EC2 instance metadata (IMDSv2): the notice items and their formats, parsed.

Pure: each function takes the status and body an item answered and returns what it announces.
404 is the normal "no notice" answer. Formats: spot/instance-action is
`{"action": "terminate|stop|hibernate", "time": RFC 3339 UTC}`; events/recommendations/rebalance
is `{"noticeTime": RFC 3339}`; events/maintenance/scheduled is a JSON array of events whose dates
use the layout `2 Jan 2006 15:04:05 GMT` and whose `State` is `active` (others are over).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

from xce_agent.notices.observed import MetadataGarbage, Observed, load_json, text_of
from xce_protocol.notices import Impact, NoticeKind

# Paths and header names, not secrets.
TOKEN_PATH = "/latest/api/token"  # noqa: S105
TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"  # noqa: S105
TOKEN_HEADER = "X-aws-ec2-metadata-token"  # noqa: S105
TOKEN_TTL = 3600  # seconds asked for; 1 to 21600 are valid
SPOT_PATH = "/latest/meta-data/spot/instance-action"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
SCHEDULED_PATH = "/latest/meta-data/events/maintenance/scheduled"

SPOT_ACTIONS = ("terminate", "stop", "hibernate")
# EC2 InstanceStatusEvent codes that end the instance; the others (instance-reboot,
# system-reboot, system-maintenance) give it back after a reboot.
_ENDS = ("instance-retirement", "instance-stop")
_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def parse_rfc3339(value: object, what: str) -> float:
    if not isinstance(value, str) or not _RFC3339.match(value):
        raise MetadataGarbage(f"{what}: expected an RFC 3339 time, got {str(value)[:40]!r}")
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise MetadataGarbage(f"{what}: not a valid time {value[:40]!r}") from None


def parse_event_time(value: object, what: str) -> float:
    """The scheduled events' `21 Jan 2019 09:00:43 GMT` (Go layout `2 Jan 2006 15:04:05 GMT`)."""
    try:
        if not isinstance(value, str):
            raise ValueError
        when = datetime.strptime(value, "%d %b %Y %H:%M:%S GMT")
    except ValueError:
        raise MetadataGarbage(
            f"{what}: expected a time like '21 Jan 2019 09:00:43 GMT', got {str(value)[:40]!r}"
        ) from None
    return when.replace(tzinfo=timezone.utc).timestamp()


def token_ttl(value: str | None, asked: int = TOKEN_TTL) -> int:
    """The TTL the token answer states, else the one asked for."""
    if value is not None and value.strip().isdigit() and 1 <= int(value) <= 21600:
        return int(value)
    return asked


def _json(status: int, body: bytes, path: str) -> Any:
    if status != 200:
        raise MetadataGarbage(f"{path}: HTTP {status}")
    return load_json(body, path)


def parse_spot(status: int, body: bytes) -> list[Observed]:
    if status == 404:
        return []
    doc = _json(status, body, "spot/instance-action")
    if not isinstance(doc, dict) or doc.get("action") not in SPOT_ACTIONS:
        raise MetadataGarbage(
            "spot/instance-action: expected an action of terminate|stop|hibernate"
        )
    when = parse_rfc3339(doc.get("time"), "spot/instance-action time")
    return [Observed("aws-spot", NoticeKind.PREEMPTION, text_of(body), deadline=when)]


def parse_rebalance(status: int, body: bytes) -> list[Observed]:
    if status == 404:
        return []
    doc = _json(status, body, "events/recommendations/rebalance")
    if not isinstance(doc, dict):
        raise MetadataGarbage("events/recommendations/rebalance: expected an object")
    parse_rfc3339(doc.get("noticeTime"), "rebalance noticeTime")  # checked, advisory only
    return [Observed("aws-rebalance", NoticeKind.REBALANCE, text_of(body))]


def parse_scheduled(status: int, body: bytes) -> list[Observed]:
    if status == 404:
        return []
    doc = _json(status, body, "events/maintenance/scheduled")
    if not isinstance(doc, list):
        raise MetadataGarbage("events/maintenance/scheduled: expected a JSON array")
    found: list[Observed] = []
    problems: list[str] = []
    for event in doc:
        try:  # one malformed event must not hide the others
            observed = _scheduled_event(event)
        except MetadataGarbage as exc:
            problems.append(str(exc))
            continue
        if observed is not None:
            found.append(observed)
    if problems:
        raise MetadataGarbage(f"{problems[0]} (event skipped)", found)
    return found


def _scheduled_event(event: Any) -> Observed | None:
    if not isinstance(event, dict):
        raise MetadataGarbage("events/maintenance/scheduled: an event is not an object")
    if event.get("State") != "active":
        return None  # canceled or completed: nothing is coming
    event_id, code = event.get("EventId"), event.get("Code")
    if not isinstance(event_id, str) or not event_id or not isinstance(code, str):
        raise MetadataGarbage("events/maintenance/scheduled: an event without EventId/Code")
    when = parse_event_time(event.get("NotBefore"), f"event {event_id[:40]} NotBefore")
    kind = NoticeKind.TERMINATION if code in _ENDS else NoticeKind.MAINTENANCE
    raw = json.dumps(event, sort_keys=True)
    return Observed(event_id, kind, raw, deadline=when, impact=Impact.REBOOT)
