"""The cluster config the reference controller reads: templates, timers, policies, auth.

Checked with the same precision as the agent's config: every problem on one line with its
path and line, unknown keys rejected, no silent defaults for bad values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xce_controller.core.model import DrainPolicy, UnmatchedJoins
from xce_controller.core.notice_config import NoticeSettings, parse_notice_settings
from xce_protocol import names
from xce_protocol.errors import ConfigError
from xce_protocol.roles import KNOWN_ROLES as ROLES
from xce_protocol.validation import Checker, describe, join_path
from xce_protocol.yamlsource import LineDict, SourceError, load_file, load_text, read_regular_file

_NAME = re.compile(names.TEMPLATE)
# Matched against the whole value, ASCII digits only (int() reads other scripts' digits too).
_WINDOW = re.compile(r"(\S+\s+)?\d{1,2}:\d{2}-\d{1,2}:\d{2}", re.ASCII)


@dataclass(frozen=True)
class Template:
    name: str
    type: str = ""
    model: str = ""
    slots: int = 1
    resources: dict[str, Any] = field(default_factory=dict)
    host_groups: tuple[str, ...] = ()
    dispatch_windows: tuple[str, ...] = ()
    roles: tuple[str, ...] = ("worker",)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "model": self.model,
            "slots": self.slots,
            "resources": dict(self.resources),
            "host_groups": list(self.host_groups),
            "dispatch_windows": list(self.dispatch_windows),
            "roles": list(self.roles),
        }


@dataclass(frozen=True)
class ClusterConfig:
    templates: dict[str, Template]
    join_deadline: float = 600.0
    drain_timeout: float = 1800.0
    drain_policy: DrainPolicy = DrainPolicy.REQUEUE
    heartbeat_interval: float = 10.0
    host_loss_grace: float = 60.0
    agent_max_backoff: float = 30.0
    rejoin_allowance: float = 10.0
    unmatched_joins: UnmatchedJoins = UnmatchedJoins.ACCEPT
    admin_token: str = field(default="", repr=False)
    join_token: str = field(default="", repr=False)
    notices: NoticeSettings = field(default_factory=NoticeSettings)
    read_token: str = field(default="", repr=False)  # metrics, events, status page only
    provisioner_token: str = field(default="", repr=False)
    max_request_body: int = 64 * 1024  # bytes; larger bodies get 413 before they are read
    on_worker_fatal: str = "close"  # close | replace: what a worker's crash loop does (crash.py)
    request_read_timeout: float = 30.0  # a request not fully read by then: closed (read_deadline)
    # The roles whose token the controller made (kept beside the database), for messages.
    generated_tokens: tuple[str, ...] = ()


DEFAULT_CONFIG = """\
version: 1
templates:
  default:
    slots: 4
"""


def load_cluster_config(path: Path | None) -> ClusterConfig:
    try:
        doc = load_file(path) if path else load_text(DEFAULT_CONFIG, "built-in config")
    except SourceError as exc:
        raise ConfigError([str(exc)]) from None
    checker = Checker(str(path) if path else "built-in config")
    config = _parse(doc, checker)
    if checker.problems or config is None:
        raise ConfigError(checker.problems)
    return config


_TOP = (
    "version",
    "templates",
    "defaults",
    "heartbeat_interval",
    "host_loss_grace",
    "agent_max_restart_backoff",
    "rejoin_allowance",
    "unmatched_joins",
    "auth",
    "notices",
    "limits",
    "on_worker_fatal",
)
TOKENS = ("admin", "provisioner", "join", "read")


def _parse(doc: LineDict, c: Checker) -> ClusterConfig | None:
    c.allowed_keys(doc, "", _TOP)
    version = c.integer(doc, "version", "", required=True)
    if version is not None and version != 1:
        c.report("version", "1", describe(version), c.line_of(doc, "version"))
    templates = _templates(doc, c)
    defaults = c.mapping(doc, "defaults", "", required=False) or LineDict()
    if "defaults" in doc and isinstance(doc["defaults"], LineDict):
        c.allowed_keys(defaults, "defaults", ("join_deadline", "drain_timeout", "drain_policy"))
    join_deadline = c.duration(defaults, "join_deadline", "defaults", default=600.0, positive=True)
    drain_timeout = c.duration(defaults, "drain_timeout", "defaults", default=1800.0)
    policy = c.choice(
        defaults, "drain_policy", "defaults", [p.value for p in DrainPolicy], default="requeue"
    )
    timers = c.mark()  # the relations below are checked only between values that parsed
    interval = c.duration(doc, "heartbeat_interval", "", default=10.0, positive=True)
    grace = c.duration(doc, "host_loss_grace", "", default=60.0, positive=True)
    backoff = c.duration(doc, "agent_max_restart_backoff", "", default=30.0)
    allowance = c.duration(doc, "rejoin_allowance", "", default=10.0)
    timers_ok = not c.failed_since(timers)
    unmatched = c.choice(
        doc, "unmatched_joins", "", [u.value for u in UnmatchedJoins], default="accept"
    )
    notices = parse_notice_settings(doc, c)
    on_fatal = c.choice(doc, "on_worker_fatal", "", ("close", "replace"), default="close")
    admin, provisioner, join, read = _auth(doc, c)
    max_body, read_timeout = _limits(doc, c)
    if timers_ok and grace <= backoff + allowance:
        c.report(
            "host_loss_grace",
            f"a duration longer than agent_max_restart_backoff + rejoin_allowance "
            f"({backoff + allowance:g}s), so a restarting worker is not taken for lost",
            describe(doc.get("host_loss_grace", grace)),
            c.line_of(doc, "host_loss_grace"),
        )
    if timers_ok and grace <= interval:
        c.report(
            "host_loss_grace",
            f"a duration longer than heartbeat_interval ({interval:g}s)",
            describe(doc.get("host_loss_grace", grace)),
            c.line_of(doc, "host_loss_grace"),
        )
    if (
        templates is not None
        and unmatched == UnmatchedJoins.ACCEPT.value
        and "default" not in templates
    ):
        c.report(
            "templates.default",
            "a default template (unmatched_joins is accept)",
            "nothing",
            c.line_of(doc, "templates"),
        )
    nums = (join_deadline, drain_timeout, interval, grace, backoff, allowance)
    if c.problems or templates is None or notices is None:
        return None
    return ClusterConfig(
        templates,
        nums[0],
        nums[1],
        DrainPolicy(policy),
        nums[2],
        nums[3],
        nums[4],
        nums[5],
        UnmatchedJoins(unmatched),
        admin,
        join,
        notices,
        read,
        provisioner,
        max_body,
        on_worker_fatal=on_fatal,
        request_read_timeout=read_timeout,
    )


def _templates(doc: LineDict, c: Checker) -> dict[str, Template] | None:
    node = c.mapping(doc, "templates", "")
    if node is None:
        return None
    result: dict[str, Template] = {}
    for name, body in node.items():
        p = f"templates.{name}"
        line = node.key_lines.get(name, node.line)
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            c.report(p, "a template name (letters, digits, . _ -)", describe(name), line)
            continue
        node = body
        if node is None:
            node = LineDict()
            node.line, node.key_lines = line, {}
        if not isinstance(node, LineDict):
            c.report(p, "a mapping", describe(node), line)
            continue
        template = _template(name, node, p, c)
        if template is not None:
            result[name] = template
    return result


def _template(name: str, body: LineDict, p: str, c: Checker) -> Template | None:
    c.allowed_keys(
        body, p, ("type", "model", "slots", "resources", "host_groups", "dispatch_windows", "roles")
    )
    kind = c.string(body, "type", p, required=False, default="")
    model = c.string(body, "model", p, required=False, default="")
    slots = c.integer(body, "slots", p, default=1, minimum=1, maximum=4096)
    resources = c.mapping(body, "resources", p, required=False)
    groups = c.string_list(body, "host_groups", p)
    windows = c.string_list(body, "dispatch_windows", p)
    for index, window in enumerate(windows or []):
        if not _WINDOW.fullmatch(window):
            c.report(
                f"{join_path(p, 'dispatch_windows')}[{index}]",
                "a window like 'Mon-Fri 08:00-18:00' or '22:00-06:00'",
                describe(window),
                c.line_of(body, "dispatch_windows"),
            )
    roles = c.string_list(body, "roles", p) if "roles" in body else ["worker"]
    for role in roles or []:
        if role not in ROLES:
            c.report(
                join_path(p, "roles"),
                f"roles from {', '.join(ROLES)}",
                describe(role),
                c.line_of(body, "roles"),
            )
    if kind is None or model is None or groups is None or windows is None or roles is None:
        return None  # each reported its problem
    return Template(
        name, kind, model, slots, dict(resources or {}), tuple(groups), tuple(windows), tuple(roles)
    )


def _auth(doc: LineDict, c: Checker) -> tuple[str, str, str, str]:
    node = c.mapping(doc, "auth", "", required=False)
    if node is None:
        return "", "", "", ""
    c.allowed_keys(node, "auth", [f"{kind}_token{end}" for kind in TOKENS for end in ("", "_file")])
    tokens: dict[str, str] = {}
    for kind in TOKENS:
        value = c.string(node, f"{kind}_token", "auth", required=False, default="")
        file_value = c.string(node, f"{kind}_token_file", "auth", required=False)
        if file_value:
            value = _token_file(node, kind, file_value, c)
        if value and not names.is_bearer_token(value):
            key = f"{kind}_token" if f"{kind}_token" in node else f"{kind}_token_file"
            c.report(  # the value is not shown: it is a secret
                f"auth.{key}",
                "a token of printable ASCII characters without spaces",
                "a token with spaces, control or non-ASCII characters",
                c.line_of(node, key),
            )
            value = ""
        for other, seen in tokens.items():
            if value and value == seen:  # one secret for two roles is one role
                c.report(
                    f"auth.{kind}_token",
                    f"a token different from auth.{other}_token",
                    "the same token",
                    c.line_of(
                        node, f"{kind}_token" if f"{kind}_token" in node else f"{kind}_token_file"
                    ),
                )
        tokens[kind] = value or ""
    return tokens["admin"], tokens["provisioner"], tokens["join"], tokens["read"]


def _token_file(node: LineDict, kind: str, path: str, c: Checker) -> str:
    """The token a file holds; "" and a problem for an unreadable, binary or empty one (an
    empty file must not read as "no token configured", which makes one up)."""
    key = f"{kind}_token_file"
    try:
        value = read_regular_file(Path(path), 64 * 1024).decode("utf-8").strip()
    except (SourceError, UnicodeDecodeError) as exc:
        detail = str(exc) if isinstance(exc, SourceError) else "not UTF-8 text"
        c.report(f"auth.{key}", "a readable file holding the token", detail, c.line_of(node, key))
        return ""
    if not value:
        c.report(f"auth.{key}", "a file holding the token", "an empty file", c.line_of(node, key))
    return value


def _limits(doc: LineDict, c: Checker) -> tuple[int, float]:
    """The largest request body, and how long one request may take to arrive."""
    node = c.mapping(doc, "limits", "", required=False)
    if node is None:
        return 64 * 1024, 30.0
    c.allowed_keys(node, "limits", ("max_request_body", "request_read_timeout"))
    value = c.integer(
        node, "max_request_body", "limits", default=64 * 1024, minimum=1024, maximum=16 << 20
    )
    timeout = c.duration(
        node, "request_read_timeout", "limits", default=30.0, minimum=1.0, maximum=3600.0
    )
    return (value if value is not None else 64 * 1024), (timeout or 30.0)
