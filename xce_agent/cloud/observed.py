"""What a provider parser reports: an event as seen, before the watcher dates it.

Some providers give the time the platform acts (AWS, Azure: absolute); others only that it
acts within some time of the notice appearing (GCE: relative, `lead`). The watcher turns a lead
into a deadline once, from the first time it saw the event, so re-reading the same value never
moves the deadline.
"""

from __future__ import annotations

from dataclasses import dataclass

from xce_protocol.notices import Impact, NoticeKind


class MetadataGarbage(ValueError):
    """An answer that does not follow the provider's documented format."""


@dataclass(frozen=True)
class Observed:
    event_id: str
    kind: NoticeKind
    raw: str
    deadline: float | None = None  # wall-clock time the platform acts, when it says
    lead: float | None = None  # else: seconds from the first sighting
    impact: Impact = Impact.REBOOT


def text_of(body: bytes, limit: int = 65536) -> str:
    """The body as text, or MetadataGarbage when it is not UTF-8 or too long."""
    if len(body) > limit:
        raise MetadataGarbage(f"answer of {len(body)} bytes")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise MetadataGarbage("answer is not UTF-8 text") from None
