"""Azure Scheduled Events: the document, parsed, and the acknowledgement body.

Pure. `GET /metadata/scheduledevents?api-version=2020-07-01` with `Metadata: true` answers
`{"DocumentIncarnation": N, "Events": [...]}`; each event has `EventId`, `EventType` (Freeze,
Reboot, Redeploy, Preempt, Terminate), `EventStatus` (Scheduled, Started), `Resources` (the VM
names it concerns: a placement group's events reach every VM in it), and `NotBefore` (RFC 1123
GMT, `""` once Started). A finished event disappears.
"""

from __future__ import annotations

import json
from email.utils import parsedate_to_datetime
from typing import Any

from xce_agent.cloud.observed import MetadataGarbage, Observed, text_of
from xce_protocol.notices import Impact, NoticeKind

EVENTS_PATH = "/metadata/scheduledevents"
API_VERSION = "2020-07-01"
NAME_PATH = "/metadata/instance/compute/name"
NAME_API_VERSION = "2021-02-01"
HEADER = "Metadata"

_KINDS = {
    "Preempt": (NoticeKind.PREEMPTION, Impact.REBOOT),
    "Terminate": (NoticeKind.TERMINATION, Impact.REBOOT),
    "Reboot": (NoticeKind.MAINTENANCE, Impact.REBOOT),
    "Redeploy": (NoticeKind.MAINTENANCE, Impact.REBOOT),
    "Freeze": (NoticeKind.MAINTENANCE, Impact.PAUSE),
}


def parse_not_before(value: object, status: str, what: str) -> float | None:
    """The NotBefore time; None for a Started event, which has none: it is under way."""
    if value == "" and status == "Started":
        return None
    try:
        if not isinstance(value, str) or not value.endswith("GMT"):
            raise ValueError
        return parsedate_to_datetime(value).timestamp()
    except (ValueError, TypeError):
        raise MetadataGarbage(
            f"{what}: expected an RFC 1123 GMT time, got {str(value)[:40]!r}"
        ) from None


def parse_events(status: int, body: bytes, vm_name: str) -> list[Observed]:
    """The events that concern this VM (all of them while its name is unknown)."""
    if status != 200:
        raise MetadataGarbage(f"scheduledevents: HTTP {status}")
    try:
        doc = json.loads(text_of(body))
    except ValueError:
        raise MetadataGarbage("scheduledevents: not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("Events"), list):
        raise MetadataGarbage("scheduledevents: expected an object with an Events list")
    incarnation = doc.get("DocumentIncarnation")
    if isinstance(incarnation, bool) or not isinstance(incarnation, int):
        raise MetadataGarbage("scheduledevents: DocumentIncarnation is not an integer")
    return [o for o in (_event(e, vm_name) for e in doc["Events"]) if o is not None]


def _event(event: Any, vm_name: str) -> Observed | None:
    if not isinstance(event, dict):
        raise MetadataGarbage("scheduledevents: an event is not an object")
    event_id, kind = event.get("EventId"), event.get("EventType")
    status, resources = event.get("EventStatus"), event.get("Resources")
    if not isinstance(event_id, str) or not event_id or status not in ("Scheduled", "Started"):
        raise MetadataGarbage("scheduledevents: an event without EventId or EventStatus")
    if not isinstance(resources, list):
        raise MetadataGarbage(f"scheduledevents: event {event_id[:40]} without Resources")
    if vm_name and vm_name not in resources:
        return None  # for another VM of the placement group
    if kind not in _KINDS:
        raise MetadataGarbage(f"scheduledevents: unknown EventType {str(kind)[:40]!r}")
    notice_kind, impact = _KINDS[kind]
    when = parse_not_before(event.get("NotBefore"), status, f"event {event_id[:40]}")
    raw = json.dumps(event, sort_keys=True)
    lead = 0.0 if when is None else None
    return Observed(event_id, notice_kind, raw, deadline=when, lead=lead, impact=impact)


def start_requests(event_ids: list[str]) -> bytes:
    """The body that approves events so the platform need not wait for NotBefore."""
    return json.dumps({"StartRequests": [{"EventId": e} for e in event_ids]}).encode()
