"""One supervised component of the agent's config, checked key by key into a ComponentSpec.

Split from config.py, which reads the rest of the file; the checks report through the same
Checker, so every problem still comes out as one `path: expected X, got Y (file line N)`.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import shutil
import signal
import urllib.parse
from pathlib import Path

from xce_agent.singleton_config import parse_singleton, singleton_stop_timeout
from xce_agent.supervision.spec import (
    ComponentSpec,
    ProbeKind,
    ProbeSpec,
    ResourceLimits,
    RestartPolicy,
    RestartSpec,
)
from xce_protocol.validation import Checker, describe, join_path
from xce_protocol.yamlsource import LineDict, LineList

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
URL = re.compile(r"^https?://[^\s/]+(/\S*)?$")

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
    "limits",
    "notice_signal",
    "singleton",
)
# Names the agent sets for every component itself; a config may not override them.
RESERVED_ENV_PREFIX = "XCE_AGENT_"
_SIZE = re.compile(r"^\s*(\d{1,15})\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_component(
    role: str, name: object, node: object, line: int, c: Checker, clustered: bool = True
) -> ComponentSpec | None:
    p = f"roles.{role}.components.{name}"
    if not isinstance(name, str) or not NAME.match(name):
        c.report(p, "a component name (letters, digits, . _ -)", describe(name), line)
        return None
    if not isinstance(node, LineDict):
        c.report(p, "a mapping", describe(node), line)
        return None
    c.allowed_keys(node, p, _COMPONENT_KEYS)
    env = _environment(node, p, c)
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
    notice_signal = _signal(node, p, c, "notice_signal") if "notice_signal" in node else None
    stop_timeout = c.duration(node, "stop_timeout", p, default=10.0)
    single_ok, singleton = parse_singleton(role, name, node, p, c, clustered)
    if singleton is not None and stop_timeout is not None:
        stop_timeout = singleton_stop_timeout(singleton, node, p, stop_timeout, c)
    restart = _restart(node, p, c)
    probe = _probe(node, p, c)
    codes = _exit_codes(node, p, c)
    limits = _limits(node, p, c)
    if (
        None in (env, command, stop_signal, stop_timeout, restart, codes, limits)
        or ("liveness_probe" in node and probe is None)
        or ("notice_signal" in node and notice_signal is None)
        or not single_ok
    ):
        return None
    assert command is not None and stop_signal is not None and stop_timeout is not None
    assert restart is not None and codes is not None and env is not None
    assert limits is not None
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
        limits=limits,
        notice_signal=notice_signal,
        singleton=singleton,
    )


def _environment(node: LineDict, p: str, c: Checker) -> dict[str, str] | None:
    env = c.string_map(node, "environment", p)
    if env is None:
        return None
    ep = join_path(p, "environment")
    env_node = node.get("environment")
    lines = env_node.key_lines if isinstance(env_node, LineDict) else {}
    for name in env:
        line = lines.get(name, node.line)
        if not name or "=" in name or "\x00" in name:
            expected = "a variable name without '=' or NUL"
            c.report(join_path(ep, name), expected, describe(name), line)
            return None
        if name.upper().startswith(RESERVED_ENV_PREFIX):
            c.report(
                join_path(ep, name),
                f"a name not starting with {RESERVED_ENV_PREFIX} (the agent sets those)",
                describe(name),
                line,
            )
            return None
    return env


def _limits(node: LineDict, p: str, c: Checker) -> ResourceLimits | None:
    if "limits" not in node:
        return ResourceLimits()
    r = c.mapping(node, "limits", p)
    if r is None:
        return None
    lp = join_path(p, "limits")
    c.allowed_keys(r, lp, ("memory_max", "cpu_weight", "tasks_max"))
    memory = _size(r, "memory_max", lp, c)
    weight = c.integer(r, "cpu_weight", lp, minimum=1, maximum=10000)
    tasks = c.integer(r, "tasks_max", lp, minimum=1, maximum=4194304)
    bad = (memory is None and "memory_max" in r) or (weight is None and "cpu_weight" in r)
    if bad or (tasks is None and "tasks_max" in r):
        return None
    return ResourceLimits(memory_max=memory, cpu_weight=weight, tasks_max=tasks)


def _size(node: LineDict, key: str, p: str, c: Checker) -> int | None:
    if key not in node:
        return None
    value = node[key]
    expected = "a size in bytes from 1M to 1T (like 512M, 4G)"
    amount: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        amount = value
    elif isinstance(value, str):
        match = _SIZE.match(value)
        if match:
            unit = (match.group(2) or "").upper()[:1].replace("B", "")
            amount = int(match.group(1)) * _SIZE_UNITS[unit]
    if amount is None or not 1024**2 <= amount <= 1024**4:
        c.report(join_path(p, key), expected, describe(value), c.line_of(node, key))
        return None
    return amount


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
        listed = c.string_list(node, key, p, required=True)
        if listed is None:
            return None
        argv = listed
    else:
        c.report(join_path(p, key), expected, describe(value), c.line_of(node, key))
        return None
    if not argv:
        c.report(join_path(p, key), expected, "an empty command", c.line_of(node, key))
        return None
    if any("\x00" in word for word in argv):
        c.report(join_path(p, key), expected, "a word with a NUL byte", c.line_of(node, key))
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


def _numeric(name: str) -> bool:
    # ASCII only: str.isdigit() and int() also take other scripts' digits ("\u0660" is 0).
    return name.isascii() and name.isdigit()


def _user_exists(name: str) -> bool:
    if not name.isascii():  # the runner would read "\u0660" as uid 0
        return False
    try:
        pwd.getpwnam(name) if not _numeric(name) else pwd.getpwuid(int(name))
    except (KeyError, OverflowError):
        return False
    return True


def _group_exists(name: str) -> bool:
    if not name.isascii():
        return False
    try:
        grp.getgrnam(name) if not _numeric(name) else grp.getgrgid(int(name))
    except (KeyError, OverflowError):
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


def _signal(node: LineDict, p: str, c: Checker, key: str = "stop_signal") -> int | None:
    if key not in node:
        return int(signal.SIGTERM)
    value = node[key]
    names = {s.name: int(s) for s in signal.Signals}
    if isinstance(value, str):
        name = value.upper() if value.upper().startswith("SIG") else f"SIG{value.upper()}"
        if name in names and not name.startswith("SIG_"):
            return names[name]
    elif isinstance(value, int) and not isinstance(value, bool) and value in names.values():
        return value
    c.report(
        join_path(p, key),
        "a signal name such as SIGTERM or SIGINT",
        describe(value),
        c.line_of(node, key),
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
        c.number(r, "multiplier", rp, default=base.multiplier, minimum=1.0, maximum=100.0),
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
            starts = c.integer(g, "starts", gp, required=True, minimum=1, maximum=10000)
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
        c.integer(r, "failure_threshold", pp, default=3, minimum=1, maximum=1000),
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
        url = c.string(r, "http", pp, pattern=URL, expected="an http:// or https:// URL")
        if url is not None and not _url_parses(url):  # every probe would fail: a restart loop
            c.report(
                join_path(pp, "http"),
                "a URL with a port from 1 to 65535",
                describe(url),
                c.line_of(r, "http"),
            )
        elif url is not None:
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


def _url_parses(url: str) -> bool:
    try:
        port = urllib.parse.urlsplit(url).port
    except ValueError:  # a port over 65535, an unclosed [IPv6 literal
        return False
    return port != 0


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
