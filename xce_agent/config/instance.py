"""The `instance` section: which instance this is (or `auto`: cloud-init's instance data),
its template and provider, the name to join as, and the join deadline."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from xce_agent.config import join_deadline
from xce_agent.config.join_deadline import JoinTimeout
from xce_protocol import names
from xce_protocol.validation import Checker, describe
from xce_protocol.yamlsource import LineDict, SourceError, read_regular_file

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_HOST = re.compile(names.HOST_NAME)  # what the controller takes as a host name


@dataclass(frozen=True)
class InstanceConfig:
    id: str
    template: str = "default"
    provider: str = ""
    host_name: str = ""  # the name to join as; "" means this system's host name
    join_deadline: float | None = None  # seconds from the first start (join_deadline.py)
    on_join_timeout: JoinTimeout | None = None


def parse_instance(doc: LineDict, c: Checker, instance_data: Path) -> InstanceConfig | None:
    node = c.mapping(doc, "instance", "")
    if node is None:
        return None
    p = "instance"
    c.allowed_keys(node, p, ("id", "template", "provider", "host_name", *join_deadline.KEYS))
    join_ok, deadline, on_timeout = join_deadline.parse(node, c)
    ident = c.string(node, "id", p, expected="an instance id or auto")
    template = c.string(
        node,
        "template",
        p,
        required=False,
        default="default",
        pattern=_NAME,
        expected="a template name (letters, digits, . _ -)",
    )
    provider = c.string(node, "provider", p, required=False, default="")
    host_name = c.string(
        node,
        "host_name",
        p,
        required=False,
        default="",
        pattern=_HOST,
        expected="a host name (letters, digits, . -)",
    )
    line = node.key_lines.get("id", node.line)
    if ident == "auto":
        ident = _instance_id_from_cloud_init(instance_data, c, line)
    # Checked as the controller checks them: a name it refuses would be refused at every join.
    if ident is not None and not names.is_instance_id(ident):
        c.report("instance.id", "an instance id (letters, digits, _ . -)", describe(ident), line)
        ident = None
    if host_name and len(host_name) > names.HOST_NAME_MAX:
        c.report(
            "instance.host_name",
            f"a host name of at most {names.HOST_NAME_MAX} characters",
            f"{len(host_name)} characters",
            c.line_of(node, "host_name"),
        )
        host_name = None
    if ident is None or template is None or provider is None or host_name is None:
        return None
    if not join_ok:
        return None
    return InstanceConfig(ident, template, provider, host_name, deadline, on_timeout)


def _instance_id_from_cloud_init(instance_data: Path, c: Checker, line: int) -> str | None:
    expected = f"v1.instance_id in cloud-init's {instance_data} (id: auto)"
    if not instance_data.exists():
        c.report("instance.id", expected, "no such file (has cloud-init run?)", line)
        return None
    try:
        data = json.loads(read_regular_file(instance_data, 16 * 1024 * 1024))
    except (SourceError, ValueError, RecursionError) as exc:
        c.report("instance.id", expected, f"an unreadable file ({exc.__class__.__name__})", line)
        return None
    v1 = data.get("v1") if isinstance(data, dict) else None
    ident = v1.get("instance_id") if isinstance(v1, dict) else None
    if not isinstance(ident, str) or not ident:
        c.report("instance.id", expected, "no instance_id in that file", line)
        return None
    return ident
