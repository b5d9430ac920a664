"""The agent's configuration (/etc/xce/agent.yaml, usually written by cloud-init).

`load_config` reads the file, checks every key and returns frozen dataclasses, or raises
ConfigError with one line per problem. Nothing here falls back to a default for a bad value.
"""

from __future__ import annotations

import json
import os
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from xce_agent.config import join_deadline
from xce_agent.config.cloud import NO_CLOUD, CloudConfig, parse_cloud
from xce_agent.config.component import parse_component
from xce_agent.config.controller_urls import loopback_url, parse_urls
from xce_agent.config.join_deadline import JoinTimeout
from xce_agent.config.metrics import MetricsConfig, parse_metrics
from xce_agent.config.notice_file import with_notice_file
from xce_agent.errors import ConfigError
from xce_agent.supervision.spec import ComponentSpec
from xce_protocol import names
from xce_protocol.protocol import MAX_COMPONENTS
from xce_protocol.roles import KNOWN_ROLES
from xce_protocol.validation import Checker, describe, join_path
from xce_protocol.yamlsource import LineDict, SourceError, load_file, read_regular_file

DEFAULT_CONFIG_PATH = Path("/etc/xce/agent.yaml")
DEFAULT_STATE_DIRECTORY = Path("/var/lib/xce-agent")
DEFAULT_INSTANCE_DATA = Path("/run/cloud-init/instance-data.json")
CONFIG_VERSION = 1

LOG_LEVELS = ("debug", "info", "warning", "error")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_HOST = re.compile(names.HOST_NAME)  # what the controller takes as a host name
__all__ = ["AgentConfig", "ControllerConfig", "InstanceConfig", "load_config", "loopback_url"]


MAX_DRAIN_ON_STOP = 86400.0  # a day: a drain bound beyond it is a typo


@dataclass(frozen=True)
class ControllerConfig:
    url: str  # the first of the controller's URLs (controller_urls.py)
    ca_file: Path | None = None
    token: str | None = field(default=None, repr=False)
    token_file: Path | None = None
    timeout: float = 10.0
    max_retry_delay: float = 30.0  # joins back off up to this (and below half the grace)
    other_urls: tuple[str, ...] = ()  # the replicas listed after it, in order
    client_cert_file: Path | None = None  # shown to a controller that asks for one (mTLS)
    client_key_file: Path | None = None
    # `xce-agent stop` first drains the host for up to this long (0: no drain; planned_stop.py)
    drain_on_stop: float = 60.0

    @property
    def urls(self) -> tuple[str, ...]:
        return (self.url, *self.other_urls)


@dataclass(frozen=True)
class InstanceConfig:
    id: str
    template: str = "default"
    provider: str = ""
    host_name: str = ""  # the name to join as; "" means this system's host name
    join_deadline: float | None = None  # seconds from the first start (join_deadline.py)
    on_join_timeout: JoinTimeout | None = None


@dataclass(frozen=True)
class AgentConfig:
    path: Path
    instance: InstanceConfig
    roles: tuple[str, ...]
    components: tuple[ComponentSpec, ...]
    state_directory: Path = DEFAULT_STATE_DIRECTORY
    controller: ControllerConfig | None = None
    log_level: str = "info"
    version: int = CONFIG_VERSION
    cloud: CloudConfig = NO_CLOUD
    metrics: MetricsConfig = field(default_factory=MetricsConfig)


def config_path(option: str | None) -> Path:
    """--config wins, then XCE_AGENT_CONFIG, then the default."""
    if option:
        return Path(option)
    env = os.environ.get("XCE_AGENT_CONFIG")
    return Path(env) if env else DEFAULT_CONFIG_PATH


def load_config(path: Path, instance_data: Path = DEFAULT_INSTANCE_DATA) -> AgentConfig:
    """Read, validate and resolve the config; ConfigError lists every problem."""
    try:
        doc = load_file(path)
    except SourceError as exc:
        raise ConfigError([str(exc)]) from None
    checker = Checker(str(path))
    config = _parse(doc, checker, path, instance_data)
    if checker.problems or config is None:
        raise ConfigError(checker.problems)
    return config


def _parse(doc: LineDict, c: Checker, path: Path, instance_data: Path) -> AgentConfig | None:
    c.allowed_keys(
        doc,
        "",
        (
            "version",
            "controller",
            "instance",
            "roles",
            "state_directory",
            "log_level",
            "cloud",
            "metrics",
        ),
    )
    version = c.integer(doc, "version", "", required=True)
    if version is not None and version != CONFIG_VERSION:
        c.report("version", f"{CONFIG_VERSION}", describe(version), c.line_of(doc, "version"))
    controller = _controller(doc, c)
    instance = _instance(doc, c, instance_data)
    roles, components = _roles(doc, c, clustered="controller" in doc)
    state_dir = c.string(doc, "state_directory", "", required=False, expected="an absolute path")
    if state_dir is not None and not state_dir.startswith("/"):
        c.report(
            "state_directory",
            "an absolute path",
            describe(state_dir),
            doc.key_lines.get("state_directory", 0),
        )
    log_level = c.choice(doc, "log_level", "", LOG_LEVELS, default="info")
    cloud = parse_cloud(doc, c, instance_data)
    if instance is not None and instance.join_deadline is not None and "controller" not in doc:
        node = doc.get("instance")
        line = c.line_of(node, "join_deadline") if isinstance(node, LineDict) else 0
        c.report("instance.join_deadline", "a controller section (whom to join)", "none", line)
    metrics = parse_metrics(doc, c)
    if c.problems or instance is None or roles is None or components is None or log_level is None:
        return None
    state_directory = Path(state_dir) if state_dir else DEFAULT_STATE_DIRECTORY
    return AgentConfig(
        path=path,
        instance=instance,
        roles=roles,
        components=tuple(with_notice_file(spec, state_directory) for spec in components),
        state_directory=state_directory,
        controller=controller,
        log_level=log_level,
        cloud=cloud,
        metrics=metrics,
    )


def _controller(doc: LineDict, c: Checker) -> ControllerConfig | None:
    node = c.mapping(doc, "controller", "", required=False)
    if node is None:
        return None
    p = "controller"
    c.allowed_keys(
        node,
        p,
        (
            "url",
            "ca_file",
            "client_cert_file",
            "client_key_file",
            "token",
            "token_file",
            "timeout",
            "max_retry_delay",
            "drain_on_stop",
            "plain_http",
        ),
    )
    urls = parse_urls(node, c)
    ca_file = _existing_file(node, "ca_file", p, c)
    client = _client_pair(node, c)
    token = c.string(node, "token", p, required=False)
    token_file = _existing_file(node, "token_file", p, c)
    if token is not None and token_file is not None:
        c.report(
            join_path(p, "token_file"),
            "either token or token_file, not both",
            "both",
            c.line_of(node, "token_file"),
        )
    if token_file is not None:
        token = _read_token(token_file, node, c)
    if token is not None and not names.is_bearer_token(token):
        key = "token_file" if token_file is not None else "token"
        c.report(  # the value is not shown: it is a secret
            join_path(p, key),
            "a token of printable ASCII characters without spaces",
            "a token with spaces, control or non-ASCII characters",
            c.line_of(node, key),
        )
        token = None
    timeout = c.duration(node, "timeout", p, default=10.0, positive=True)
    retry = c.duration(node, "max_retry_delay", p, default=30.0, minimum=1.0)
    drain = c.duration(node, "drain_on_stop", p, default=60.0, maximum=MAX_DRAIN_ON_STOP)
    if urls is None or timeout is None or retry is None:
        return None
    return ControllerConfig(
        urls[0], ca_file, token, token_file, timeout, retry, urls[1:], *client, drain_on_stop=drain
    )


def _client_pair(node: LineDict, c: Checker) -> tuple[Path | None, Path | None]:
    """The client certificate and its key, both or neither."""
    cert = _existing_file(node, "client_cert_file", "controller", c)
    key = _existing_file(node, "client_key_file", "controller", c)
    for given, other in (
        ("client_cert_file", "client_key_file"),
        ("client_key_file", "client_cert_file"),
    ):
        if given in node and other not in node:
            c.report(
                join_path("controller", other),
                f"a file path beside {given}",
                "nothing",
                c.line_of(node, given),
            )
            return None, None
    if cert is None or key is None:
        return None, None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as exc:
        c.report(
            "controller.client_cert_file",
            "a PEM certificate and, in client_key_file, its unencrypted key",
            str(getattr(exc, "reason", None) or exc).replace("_", " ").lower(),
            c.line_of(node, "client_cert_file"),
        )
        return None, None
    return cert, key


def _existing_file(node: LineDict, key: str, path: str, c: Checker) -> Path | None:
    value = c.string(node, key, path, required=False, expected="an absolute path to a file")
    if value is None:
        return None
    if not value.startswith("/") or not Path(value).is_file():
        c.report(
            join_path(path, key),
            "an absolute path to an existing file",
            describe(value),
            c.line_of(node, key),
        )
        return None
    return Path(value)


def _read_token(token_file: Path, node: LineDict, c: Checker) -> str | None:
    try:
        token = read_regular_file(token_file, 64 * 1024).decode("utf-8").strip()
    except (SourceError, UnicodeDecodeError) as exc:
        detail = str(exc) if isinstance(exc, SourceError) else "not UTF-8 text"
        c.report(
            "controller.token_file",
            "a readable file holding the token",
            f"an unreadable file ({detail})",
            c.line_of(node, "token_file"),
        )
        return None
    if not token:
        c.report(
            "controller.token_file",
            "a file holding the token",
            "an empty file",
            c.line_of(node, "token_file"),
        )
        return None
    return token


def _instance(doc: LineDict, c: Checker, instance_data: Path) -> InstanceConfig | None:
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


def _roles(
    doc: LineDict, c: Checker, clustered: bool
) -> tuple[tuple[str, ...] | None, tuple[ComponentSpec, ...] | None]:
    node = c.mapping(doc, "roles", "")
    if node is None:
        return None, None
    if not node:
        c.report(
            "roles", f"at least one role of {', '.join(KNOWN_ROLES)}", "an empty mapping", node.line
        )
        return None, None
    roles: list[str] = []
    components: list[ComponentSpec] = []
    seen: set[str] = set()
    for role, body in node.items():
        line = node.key_lines.get(role, node.line)
        if role not in KNOWN_ROLES:
            c.report(
                f"roles.{role}",
                f"a known role ({', '.join(KNOWN_ROLES)})",
                f"unknown role {str(role)!r}",
                line,
            )
            continue
        roles.append(str(role))
        if not isinstance(body, LineDict):
            c.report(f"roles.{role}", "a mapping with components", describe(body), line)
            continue
        c.allowed_keys(body, f"roles.{role}", ("components",))
        comps = c.mapping(body, "components", f"roles.{role}")
        for name, spec in (comps or {}).items():
            line = comps.key_lines.get(name, 0) if comps else 0
            parsed = parse_component(str(role), name, spec, line, c, clustered)
            if parsed is not None:
                if parsed.name in seen:
                    c.report(
                        f"roles.{role}.components.{name}",
                        "a component name unique on the host",
                        "a name another role uses",
                        comps.key_lines.get(name, 0) if comps else 0,
                    )
                seen.add(parsed.name)
                _one_per_lease(parsed, components, f"roles.{role}.components.{name}", line, c)
                components.append(parsed)
    if len(components) > MAX_COMPONENTS:  # the controller refuses every heartbeat then
        expected = f"at most {MAX_COMPONENTS} components (what a heartbeat may report)"
        c.report("roles", expected, f"{len(components)}", node.line)
    return tuple(roles), tuple(components)


def _one_per_lease(
    spec: ComponentSpec, earlier: list[ComponentSpec], path: str, line: int, c: Checker
) -> None:
    """Two singletons of one host under one lease would share its hold (one agent run is
    one holder): both would run at once, and a release by one frees the lease while the
    other still runs."""
    if spec.singleton is None:
        return
    lease = spec.singleton.lease
    other = next((e for e in earlier if e.singleton and e.singleton.lease == lease), None)
    if other is not None:
        c.report(
            f"{path}.singleton",
            "a lease no other component of the host uses",
            f"lease {lease!r}, also {other.name}'s",
            line,
        )
