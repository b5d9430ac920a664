"""The `cloud:` section of the agent's config: which provider's notices to watch, and how.

`provider: auto` reads `v1.cloud_name` from cloud-init's instance data (aws, gce, azure are
watched; any other cloud has nothing to watch; without instance data, say on a host that
cloud-init did not set up, nothing is watched and the agent says so when it starts, while
an unreadable or garbled file is a config error). Without the section nothing is watched.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from xce_protocol.validation import Checker, describe, join_path
from xce_protocol.yamlsource import LineDict, SourceError, read_regular_file

PROVIDERS = ("aws", "gce", "azure")
CHOICES = ("auto", *PROVIDERS, "none")
DEFAULT_POLL_INTERVAL = 1.0
MIN_POLL_INTERVAL = 0.2  # Azure allows 5 requests a second; AWS throttles per instance
_URL = re.compile(r"^https?://[^\s/?#]+(/[^\s?#]*)?$")


@dataclass(frozen=True)
class CloudConfig:
    provider: str  # aws, gce, azure or none (auto is resolved when the config is read)
    metadata_url: str = ""  # "" means the provider's own address
    poll_interval: float = DEFAULT_POLL_INTERVAL
    detected: str = ""  # what cloud-init named, when provider was auto
    note: str = ""  # why auto found nothing to watch, logged when the agent starts


NO_CLOUD = CloudConfig("none")


def parse_cloud(doc: LineDict, c: Checker, instance_data: Path) -> CloudConfig:
    """The section; its default after a reported problem (c.problems tells)."""
    node = c.mapping(doc, "cloud", "", required=False)
    if node is None:
        return NO_CLOUD
    p = "cloud"
    c.allowed_keys(node, p, ("provider", "metadata_url", "poll_interval"))
    provider = c.choice(node, "provider", p, CHOICES, default="auto")
    url = c.string(
        node,
        "metadata_url",
        p,
        required=False,
        default="",
        pattern=_URL,
        expected="an http:// or https:// URL without query",
    )
    interval = c.duration(
        node, "poll_interval", p, default=DEFAULT_POLL_INTERVAL, minimum=MIN_POLL_INTERVAL
    )
    if provider is None or url is None or interval is None:
        return NO_CLOUD
    if provider == "none" and ("metadata_url" in node or "poll_interval" in node):
        key = "metadata_url" if "metadata_url" in node else "poll_interval"
        c.report(
            join_path(p, key),
            f"no {key} with provider none",
            describe(node[key]),
            c.line_of(node, key),
        )
        return NO_CLOUD
    detected = ""
    if provider == "auto":
        if not instance_data.exists():
            note = f"provider auto: no {instance_data} (cloud-init did not run): nothing watched"
            return CloudConfig("none", note=note)
        found = _cloud_name(instance_data, c, c.line_of(node, "provider"))
        if found is None:
            return NO_CLOUD
        detected = found
        provider = found if found in PROVIDERS else "none"
    return CloudConfig(provider, url.rstrip("/"), interval, detected)


def _cloud_name(instance_data: Path, c: Checker, line: int) -> str | None:
    expected = f"v1.cloud_name in cloud-init's {instance_data} (provider: auto)"
    try:
        data = json.loads(read_regular_file(instance_data, 16 * 1024 * 1024))
    except (SourceError, ValueError, RecursionError) as exc:
        c.report("cloud.provider", expected, f"an unreadable file ({exc.__class__.__name__})", line)
        return None
    v1 = data.get("v1") if isinstance(data, dict) else None
    name = v1.get("cloud_name") if isinstance(v1, dict) else None
    if not isinstance(name, str) or not name:
        c.report("cloud.provider", expected, "no cloud_name in that file", line)
        return None
    return name.lower()
