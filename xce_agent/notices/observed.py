"""What a provider parser reports: an event as seen, before the watcher dates it.

Some providers give the time the platform acts (AWS, Azure: absolute); others only that it
acts within some time of the notice appearing (GCE: relative, `lead`). The watcher turns a lead
into a deadline once, from the first time it saw the event, so re-reading the same value never
moves the deadline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from xce_protocol.notices import Impact, NoticeKind


class MetadataGarbage(ValueError):
    """An answer that does not follow the provider's documented format.

    `observed`, when not None, is what the answer's valid part still announces (the events
    beside a malformed one, a value without its ETag): the watcher acts on it and logs the
    problem like any other.
    """

    def __init__(self, message: str, observed: list[Observed] | None = None) -> None:
        super().__init__(message)
        self.observed = observed


@dataclass(frozen=True)
class Observed:
    event_id: str
    kind: NoticeKind
    raw: str
    deadline: float | None = None  # wall-clock time the platform acts, when it says
    lead: float | None = None  # else: seconds from the first sighting
    impact: Impact = Impact.REBOOT
    approvable: bool = False  # Azure: the platform may be told to go ahead (this VM alone)


def text_of(body: bytes, limit: int = 65536) -> str:
    """The body as text, or MetadataGarbage when it is not UTF-8 or too long."""
    if len(body) > limit:
        raise MetadataGarbage(f"answer of {len(body)} bytes")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise MetadataGarbage("answer is not UTF-8 text") from None


def load_json(body: bytes, what: str) -> Any:
    """The body as JSON, or MetadataGarbage (nesting too deep for the parser included)."""
    try:
        return json.loads(text_of(body))
    except (ValueError, RecursionError):
        raise MetadataGarbage(f"{what}: not JSON") from None
