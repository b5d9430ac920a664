"""The agent's configuration (/etc/xce/agent.yaml, usually written by cloud-init).

`load_config` reads the file, checks every key and returns frozen dataclasses, or raises
ConfigError with one line per problem. Nothing here falls back to a default for a bad value.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import shlex
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path

from xce_agent.errors import ConfigError
from xce_agent.supervision.spec import (
    ComponentSpec,
    ProbeKind,
    ProbeSpec,
    RestartPolicy,
    RestartSpec,
)
from xce_agent.validation import Checker, describe, join_path
from xce_agent.yamlsource import LineDict, LineList, SourceError, load_file

DEFAULT_CONFIG_PATH = Path("/etc/xce/agent.yaml")
DEFAULT_STATE_DIRECTORY = Path("/var/lib/xce-agent")
DEFAULT_INSTANCE_DATA = Path("/run/cloud-init/instance-data.json")
CONFIG_VERSION = 1
# Roles a host can take (the brief's node-manager roles); components belong to one of them.
KNOWN_ROLES = ("worker", "provisioner", "reverse-proxy")
LOG_LEVELS = ("debug", "info", "warning", "error")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,252}$")
_URL = re.compile(r"^https?://[^\s/]+(/\S*)?$")


@dataclass(frozen=True)
class ControllerConfig:
    url: str
    ca_file: Path | None = None
    token: str | None = field(default=None, repr=False)
    token_file: Path | None = None
    timeout: float = 10.0
    max_retry_delay: float = 30.0  # joins back off up to this (and below half the grace)


@dataclass(frozen=True)
class InstanceConfig:
    id: str
    template: str = "default"
    provider: str = ""
    host_name: str = ""  # the name to join as; "" means this system's host name


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
        doc, "", ("version", "controller", "instance", "roles", "state_directory", "log_level")
    )
    version = c.integer(doc, "version", "", required=True)
    if version is not None and version != CONFIG_VERSION:
        c.report("version", f"{CONFIG_VERSION}", describe(version), c.line_of(doc, "version"))
    controller = _controller(doc, c)
    instance = _instance(doc, c, instance_data)
    roles, components = _roles(doc, c)
    state_dir = c.string(doc, "state_directory", "", required=False, expected="an absolute path")
    if state_dir is not None and not state_dir.startswith("/"):
        c.report(
            "state_directory",
            "an absolute path",
            describe(state_dir),
            doc.key_lines.get("state_directory", 0),
        )
    log_level = c.choice(doc, "log_level", "", LOG_LEVELS, default="info")
    if c.problems or instance is None or roles is None or components is None or log_level is None:
        return None
    return AgentConfig(
        path=path,
        instance=instance,
        roles=roles,
        components=components,
        state_directory=Path(state_dir) if state_dir else DEFAULT_STATE_DIRECTORY,
        controller=controller,
        log_level=log_level,
    )


def _controller(doc: LineDict, c: Checker) -> ControllerConfig | None:
    node = c.mapping(doc, "controller", "", required=False)
    if node is None:
        return None
    p = "controller"
    c.allowed_keys(node, p, ("url", "ca_file", "token", "token_file", "timeout", "max_retry_delay"))
    url = c.string(node, "url", p, pattern=_URL, expected="an http:// or https:// URL")
    ca_file = _existing_file(node, "ca_file", p, c)
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
    timeout = c.duration(node, "timeout", p, default=10.0, positive=True)
    retry = c.duration(node, "max_retry_delay", p, default=30.0, minimum=1.0)
    if url is None or timeout is None or retry is None:
        return None
    return ControllerConfig(url.rstrip("/"), ca_file, token, token_file, timeout, retry)


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
        token = token_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        c.report(
            "controller.token_file",
            "a readable file holding the token",
            f"an unreadable file ({exc.__class__.__name__})",
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
    c.allowed_keys(node, p, ("id", "template", "provider", "host_name"))
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
    if ident == "auto":
        ident = _instance_id_from_cloud_init(instance_data, c, node.key_lines.get("id", node.line))
    if ident is None or template is None or provider is None or host_name is None:
        return None
    return InstanceConfig(ident, template, provider, host_name)


def _instance_id_from_cloud_init(instance_data: Path, c: Checker, line: int) -> str | None:
    expected = f"v1.instance_id in cloud-init's {instance_data} (id: auto)"
    try:
        data = json.loads(instance_data.read_text(encoding="utf-8"))
    except FileNotFoundError:
        c.report("instance.id", expected, "no such file (has cloud-init run?)", line)
        return None
    except (OSError, ValueError) as exc:
        c.report("instance.id", expected, f"an unreadable file ({exc.__class__.__name__})", line)
        return None
    ident = data.get("v1", {}).get("instance_id") if isinstance(data, dict) else None
    if not isinstance(ident, str) or not ident:
        c.report("instance.id", expected, "no instance_id in that file", line)
        return None
    return ident


def _roles(
    doc: LineDict, c: Checker
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
            parsed = _component(
                str(role), name, spec, comps.key_lines.get(name, 0) if comps else 0, c
            )
            if parsed is not None:
                if parsed.name in seen:
                    c.report(
                        f"roles.{role}.components.{name}",
                        "a component name unique on the host",
                        "a name another role uses",
                        comps.key_lines.get(name, 0) if comps else 0,
                    )
                seen.add(parsed.name)
                components.append(parsed)
    return tuple(roles), tuple(components)


_COMPONENT_KEYS = (
    "command",
    "user",
    "group",
    "environment",
    "working_directory",
    "stop_signal",
    "stop_timeout",
    "restart",
    "liveness_probe",
    "decommission_exit_codes",
)


def _component(
    role: str, name: object, node: object, line: int, c: Checker
) -> ComponentSpec | None:
    p = f"roles.{role}.components.{name}"
    if not isinstance(name, str) or not _NAME.match(name):
        c.report(p, "a component name (letters, digits, . _ -)", describe(name), line)
        return None
    if not isinstance(node, LineDict):
        c.report(p, "a mapping", describe(node), line)
        return None
    c.allowed_keys(node, p, _COMPONENT_KEYS)
    env = c.string_map(node, "environment", p)
    command = _command(node, "command", p, c, env or {})
    user = _account(node, "user", p, c, _user_exists)
    group = _account(node, "group", p, c, _group_exists)
    workdir = c.string(
        node, "working_directory", p, required=False, expected="an absolute path to a directory"
    )
    if workdir is not None and (not workdir.startswith("/") or not Path(workdir).is_dir()):
        c.report(
            join_path(p, "working_directory"),
            "an absolute path to an existing directory",
            describe(workdir),
            c.line_of(node, "working_directory"),
        )
    stop_signal = _signal(node, p, c)
    stop_timeout = c.duration(node, "stop_timeout", p, default=10.0)
    restart = _restart(node, p, c)
    probe = _probe(node, p, c)
    codes = _exit_codes(node, p, c)
    if None in (env, command, stop_signal, stop_timeout, restart, codes) or (
        "liveness_probe" in node and probe is None
    ):
        return None
    assert command is not None and stop_signal is not None and stop_timeout is not None
    assert restart is not None and codes is not None and env is not None
    return ComponentSpec(
        name=name,
        command=tuple(command),
        role=role,
        user=user,
        group=group,
        environment=env,
        working_directory=workdir,
        stop_signal=stop_signal,
        stop_timeout=stop_timeout,
        restart=restart,
        liveness=probe,
        decommission_exit_codes=frozenset(codes),
    )


def _command(node: LineDict, key: str, p: str, c: Checker, env: dict[str, str]) -> list[str] | None:
    expected = "a command: a list of strings or one string"
    if key not in node:
        c.report(join_path(p, key), expected, "nothing", node.line)
        return None
    value = node[key]
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            c.report(
                join_path(p, key), expected, f"{describe(value)} ({exc})", c.line_of(node, key)
            )
            return None
    elif isinstance(value, LineList):
        argv = c.string_list(node, key, p, required=True) or []
    else:
        c.report(join_path(p, key), expected, describe(value), c.line_of(node, key))
        return None
    if not argv:
        c.report(join_path(p, key), expected, "an empty command", c.line_of(node, key))
        return None
    search = env.get("PATH", os.environ.get("PATH", os.defpath))
    if shutil.which(argv[0], path=search) is None:
        c.report(
            join_path(p, key),
            "an executable program as the first word",
            f"{argv[0]!r}, which is not an executable found on PATH",
            c.line_of(node, key),
        )
        return None
    return argv


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name) if not name.isdigit() else pwd.getpwuid(int(name))
    except KeyError:
        return False
    return True


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name) if not name.isdigit() else grp.getgrgid(int(name))
    except KeyError:
        return False
    return True


def _account(node: LineDict, key: str, p: str, c: Checker, exists: object) -> str | None:
    value = c.string(node, key, p, required=False, expected=f"an existing {key} name")
    if value is None:
        return None
    assert callable(exists)
    if not exists(value):
        c.report(
            join_path(p, key),
            f"an existing {key} on this host",
            describe(value),
            c.line_of(node, key),
        )
        return None
    return value


def _signal(node: LineDict, p: str, c: Checker) -> int | None:
    if "stop_signal" not in node:
        return int(signal.SIGTERM)
    value = node["stop_signal"]
    names = {s.name: int(s) for s in signal.Signals}
    if isinstance(value, str):
        key = value.upper() if value.upper().startswith("SIG") else f"SIG{value.upper()}"
        if key in names and not key.startswith("SIG_"):
            return names[key]
    elif isinstance(value, int) and not isinstance(value, bool) and value in names.values():
        return value
    c.report(
        join_path(p, "stop_signal"),
        "a signal name such as SIGTERM or SIGINT",
        describe(value),
        c.line_of(node, "stop_signal"),
    )
    return None


def _restart(node: LineDict, p: str, c: Checker) -> RestartSpec | None:
    base = RestartSpec()
    if "restart" not in node:
        return base
    r = c.mapping(node, "restart", p)
    if r is None:
        return None
    rp = join_path(p, "restart")
    c.allowed_keys(
        r,
        rp,
        (
            "policy",
            "initial_delay",
            "delay",
            "max_delay",
            "multiplier",
            "jitter",
            "reset_after",
            "give_up",
        ),
    )
    policy = c.choice(r, "policy", rp, [x.value for x in RestartPolicy], default=base.policy.value)
    values = (
        c.duration(r, "initial_delay", rp, default=base.initial_delay),
        c.duration(r, "delay", rp, default=base.delay),
        c.duration(r, "max_delay", rp, default=base.max_delay),
        c.number(r, "multiplier", rp, default=base.multiplier, minimum=1.0),
        c.number(r, "jitter", rp, default=base.jitter, minimum=0.0, maximum=1.0),
        c.duration(r, "reset_after", rp, default=base.reset_after),
    )
    starts: int | None = base.give_up_starts
    window: float | None = base.give_up_window
    if "give_up" in r:
        g = c.mapping(r, "give_up", rp)
        gp = join_path(rp, "give_up")
        if g is not None:
            c.allowed_keys(g, gp, ("starts", "window"))
            starts = c.integer(g, "starts", gp, required=True, minimum=1)
            window = c.duration(g, "window", gp, required=True, positive=True)
        else:
            return None
    numbers = [v for v in values if v is not None]
    if policy is None or len(numbers) != len(values) or starts is None or window is None:
        return None
    initial, delay, max_delay, mult, jitter, reset = numbers
    if max_delay < max(initial, delay):
        c.report(
            join_path(rp, "max_delay"),
            "a duration >= initial_delay and delay",
            describe(r.get("max_delay", max_delay)),
            c.line_of(r, "max_delay"),
        )
        return None
    return RestartSpec(
        RestartPolicy(policy), initial, delay, max_delay, mult, jitter, reset, starts, window
    )


def _probe(node: LineDict, p: str, c: Checker) -> ProbeSpec | None:
    if "liveness_probe" not in node:
        return None
    r = c.mapping(node, "liveness_probe", p)
    if r is None:
        return None
    pp = join_path(p, "liveness_probe")
    c.allowed_keys(
        r, pp, ("exec", "tcp", "http", "initial_delay", "period", "timeout", "failure_threshold")
    )
    kinds = [k for k in ("exec", "tcp", "http") if k in r]
    if len(kinds) != 1:
        c.report(pp, "exactly one of exec, tcp, http", f"{len(kinds)} of them", r.line)
        return None
    timing = (
        c.duration(r, "initial_delay", pp, default=10.0),
        c.duration(r, "period", pp, default=10.0, positive=True),
        c.duration(r, "timeout", pp, default=2.0, positive=True),
        c.integer(r, "failure_threshold", pp, default=3, minimum=1),
    )
    kind = kinds[0]
    probe: ProbeSpec | None = None
    if kind == "exec":
        argv = _command(r, "exec", pp, c, {})
        if argv:
            probe = ProbeSpec(ProbeKind.EXEC, command=tuple(argv))
    elif kind == "tcp":
        value = c.string(r, "tcp", pp, expected="HOST:PORT")
        host, _, port = (value or "").rpartition(":")
        if value is not None and (not host or not port.isdigit() or not 0 < int(port) < 65536):
            c.report(
                join_path(pp, "tcp"),
                "HOST:PORT with a port from 1 to 65535",
                describe(value),
                c.line_of(r, "tcp"),
            )
        elif value is not None:
            probe = ProbeSpec(ProbeKind.TCP, host=host.strip("[]"), port=int(port))
    else:
        url = c.string(r, "http", pp, pattern=_URL, expected="an http:// or https:// URL")
        if url is not None:
            probe = ProbeSpec(ProbeKind.HTTP, url=url)
    if probe is None or None in timing:
        return None
    initial, period, timeout, threshold = timing
    assert initial is not None and period is not None and timeout is not None
    assert threshold is not None
    return ProbeSpec(
        probe.kind,
        probe.command,
        probe.host,
        probe.port,
        probe.url,
        initial,
        period,
        timeout,
        int(threshold),
    )


def _exit_codes(node: LineDict, p: str, c: Checker) -> list[int] | None:
    key = "decommission_exit_codes"
    if key not in node:
        return []
    value = node[key]
    expected = "a list of exit codes from 1 to 255"
    if not isinstance(value, LineList):
        c.report(join_path(p, key), expected, describe(value), c.line_of(node, key))
        return None
    codes: list[int] = []
    for index, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= 255:
            c.report(
                f"{join_path(p, key)}[{index}]",
                "an exit code from 1 to 255",
                describe(item),
                value.item_lines[index],
            )
            return None
        codes.append(item)
    return codes
