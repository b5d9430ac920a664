"""The agent config's `metrics:` section: where to write the textfile, where to serve it.

metrics:
  textfile: /var/lib/prometheus/node-exporter/xce-agent.prom
  listen: 127.0.0.1:9871      # optional: also serve GET /metrics on this port
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from xce_protocol.validation import Checker, describe, join_path
from xce_protocol.yamlsource import LineDict

_LISTEN = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[0-9.]+|localhost):(\d{1,5})$")


@dataclass(frozen=True)
class MetricsConfig:
    textfile: Path | None = None
    listen: tuple[str, int] | None = None


def parse_metrics(doc: LineDict, c: Checker) -> MetricsConfig:
    """The section; its default after a reported problem (c.problems tells)."""
    node = c.mapping(doc, "metrics", "", required=False)
    if node is None:
        return MetricsConfig()
    p = "metrics"
    c.allowed_keys(node, p, ("textfile", "listen"))
    textfile = c.string(node, "textfile", p, required=False)
    if textfile is not None and not (textfile.startswith("/") and textfile.endswith(".prom")):
        # node_exporter's textfile collector reads only *.prom files.
        c.report(
            join_path(p, "textfile"),
            "an absolute path ending in .prom",
            describe(textfile),
            c.line_of(node, "textfile"),
        )
        return MetricsConfig()
    listen = _listen(node, c)
    if "listen" in node and listen is None:
        return MetricsConfig()
    return MetricsConfig(Path(textfile) if textfile else None, listen)


def _listen(node: LineDict, c: Checker) -> tuple[str, int] | None:
    text = c.string(node, "listen", "metrics", required=False)
    if text is None:
        return None
    match = _LISTEN.match(text)
    port = int(match.group(2)) if match else 0
    host = match.group(1).strip("[]") if match else ""
    if match and host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            match = None
    if not match or not 0 < port < 65536:
        c.report(
            "metrics.listen",
            "ADDRESS:PORT (an IP address, port 1-65535)",
            describe(text),
            c.line_of(node, "listen"),
        )
        return None
    return host, port
