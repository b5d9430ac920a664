"""Google Compute Engine metadata server: the preemption and maintenance keys, parsed.

Pure. `instance/preempted` is `FALSE`, then `TRUE` once preemption starts (ACPI soft off follows,
and 30 s later the hard stop). `instance/maintenance-event` is `NONE`, or
`MIGRATE_ON_HOST_MAINTENANCE` / `TERMINATE_ON_HOST_MAINTENANCE` about 60 s before the event, then
`NONE` again. Every answer must carry `Metadata-Flavor: Google`, else it is not the metadata
server speaking.
"""

from __future__ import annotations

import re

from xce_agent.notices.observed import MetadataGarbage, Observed, text_of
from xce_protocol.notices import Impact, NoticeKind

FLAVOR_HEADER = "Metadata-Flavor"
FLAVOR = "Google"
PREFIX = "/computeMetadata/v1/"
PREEMPTED_KEY = "instance/preempted"
MAINTENANCE_KEY = "instance/maintenance-event"
PREEMPTION_LEAD = 30.0  # soft off to hard off
MAINTENANCE_LEAD = 60.0  # the key changes this long before the event
_VALUE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")


def value_of(status: int, flavor: str | None, body: bytes, key: str) -> str:
    if status != 200:
        raise MetadataGarbage(f"{key}: HTTP {status}")
    if flavor != FLAVOR:
        raise MetadataGarbage(f"{key}: answer without {FLAVOR_HEADER}: {FLAVOR}")
    value = text_of(body, limit=256).strip()
    if not _VALUE.match(value):
        raise MetadataGarbage(f"{key}: unexpected value {value[:40]!r}")
    return value


def parse_preempted(value: str) -> list[Observed]:
    if value == "TRUE":
        return [Observed("gce-preempted", NoticeKind.PREEMPTION, value, lead=PREEMPTION_LEAD)]
    if value == "FALSE":
        return []
    raise MetadataGarbage(f"{PREEMPTED_KEY}: expected TRUE or FALSE, got {value[:40]!r}")


def parse_maintenance(value: str) -> list[Observed]:
    if value == "NONE":
        return []
    # Live migration keeps memory; anything else (terminate, or a newer value) stops the VM.
    impact = Impact.PAUSE if value == "MIGRATE_ON_HOST_MAINTENANCE" else Impact.REBOOT
    return [
        Observed(
            f"gce-maintenance-{value.lower()}",
            NoticeKind.MAINTENANCE,
            value,
            lead=MAINTENANCE_LEAD,
            impact=impact,
        )
    ]
