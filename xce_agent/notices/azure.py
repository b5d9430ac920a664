"""Azure Scheduled Events: the document, parsed, and the acknowledgement body.

Pure. `GET /metadata/scheduledevents?api-version=2020-07-01` with `Metadata: true` answers
`{"DocumentIncarnation": N, "Events": [...]}`; each event has `EventId`, `EventType` (Freeze,
Reboot, Redeploy, Preempt, Terminate), `EventStatus` (Scheduled, Started), `Resources` (the VM
names it concerns: a placement group's events reach every VM in it), and `NotBefore` (RFC 1123
GMT, `""` once Started). A finished event disappears. A malformed or unknown event is skipped
(and reported) without hiding the others. Approval releases an event for every VM it names, so
only an event naming this VM alone may be approved.
"""

from __future__ import annotations

import json
from email.utils import parsedate_to_datetime
from typing import Any

from xce_agent.notices.observed import MetadataGarbage, Observed, load_json
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
    doc = load_json(body, "scheduledevents")
    if not isinstance(doc, dict) or not isinstance(doc.get("Events"), list):
        raise MetadataGarbage("scheduledevents: expected an object with an Events list")
    incarnation = doc.get("DocumentIncarnation")
    if isinstance(incarnation, bool) or not isinstance(incarnation, int):
        raise MetadataGarbage("scheduledevents: DocumentIncarnation is not an integer")
    found: list[Observed] = []
    problems: list[str] = []
    for event in doc["Events"]:
        # One malformed or unknown event must not hide the others (a Preempt beside it).
        try:
            observed = _event(event, vm_name)
        except MetadataGarbage as exc:
            problems.append(str(exc))
            continue
        if observed is not None:
            found.append(observed)
    if problems:
        raise MetadataGarbage(f"{problems[0]} (event skipped)", found)
    return found


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
    # Approving an event releases it for every VM it names: only one naming this VM alone.
    alone = bool(vm_name) and resources == [vm_name]
    return Observed(
        event_id, notice_kind, raw, deadline=when, lead=lead, impact=impact, approvable=alone
    )


def start_requests(event_ids: list[str]) -> bytes:
    """The body that approves events so the platform need not wait for NotBefore."""
    return json.dumps({"StartRequests": [{"EventId": e} for e in event_ids]}).encode()
