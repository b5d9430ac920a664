"""One supervised component of the agent's config, checked key by key into a ComponentSpec.

agent.py reads the rest of the file; the command, restart policy, probe and limits have a
module each here (command, restart, probe, limits). All report through the same Checker, so
every problem still comes out as one `path: expected X, got Y (file line N)`.
"""

from __future__ import annotations

import grp
import pwd
import re
import signal
from pathlib import Path

from xce_agent.config.command import parse_command
from xce_agent.config.limits import parse_limits
from xce_agent.config.probe import parse_probe
from xce_agent.config.program_access import account
from xce_agent.config.restart import parse_restart
from xce_agent.config.singleton import parse_singleton, singleton_stop_timeout
from xce_agent.supervision.spec import STOP_SIGNAL, STOP_TIMEOUT, ComponentSpec
from xce_protocol.validation import Checker, describe, join_path
from xce_protocol.yamlsource import LineDict, LineList

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")

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


def parse_component(
    role: str, name: object, node: object, line: int, c: Checker, clustered: bool = True
) -> ComponentSpec | None:
    p = f"roles.{role}.components.{name}"
    if not isinstance(name, str) or not NAME.fullmatch(name):
        c.report(p, "a component name (letters, digits, . _ -)", describe(name), line)
        return None
    if not isinstance(node, LineDict):
        c.report(p, "a mapping", describe(node), line)
        return None
    c.allowed_keys(node, p, _COMPONENT_KEYS)
    mark = c.mark()
    env = _environment(node, p, c)
    user = _account(node, "user", p, c, _user_exists)
    group = _account(node, "group", p, c, _group_exists)
    runs_as = account(user, group) if user is not None else None
    command = parse_command(node, "command", p, c, env, runs_as)
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
    timeout_mark = c.mark()
    stop_timeout = c.duration(node, "stop_timeout", p, default=STOP_TIMEOUT)
    timeout_ok = not c.failed_since(timeout_mark)  # a reported value is not checked again
    _, singleton = parse_singleton(role, name, node, p, c, clustered)
    if singleton is not None and timeout_ok:
        stop_timeout = singleton_stop_timeout(singleton, node, p, stop_timeout, c)
    restart = parse_restart(node, p, c)
    probe = parse_probe(node, p, c, runs_as)
    codes = _exit_codes(node, p, c)
    limits = parse_limits(node, p, c)
    if command is None or c.failed_since(mark):  # each part reported its own problem
        return None
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


def _environment(node: LineDict, p: str, c: Checker) -> dict[str, str]:
    env = c.string_map(node, "environment", p)
    if env is None:
        return {}
    ep = join_path(p, "environment")
    env_node = node.get("environment")
    lines = env_node.key_lines if isinstance(env_node, LineDict) else {}
    for name in env:
        line = lines.get(name, node.line)
        if not name or "=" in name or "\x00" in name:
            expected = "a variable name without '=' or NUL"
            c.report(join_path(ep, name), expected, describe(name), line)
            return {}
        if name.upper().startswith(RESERVED_ENV_PREFIX):
            c.report(
                join_path(ep, name),
                f"a name not starting with {RESERVED_ENV_PREFIX} (the agent sets those)",
                describe(name),
                line,
            )
            return {}
    return env


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


def _signal(node: LineDict, p: str, c: Checker, key: str = "stop_signal") -> int:
    """The signal at `key`: SIGTERM when absent, and after a reported problem."""
    if key not in node:
        return STOP_SIGNAL
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
    return STOP_SIGNAL


def _exit_codes(node: LineDict, p: str, c: Checker) -> list[int]:
    key = "decommission_exit_codes"
    if key not in node:
        return []
    value = node[key]
    expected = "a list of exit codes from 1 to 255"
    if not isinstance(value, LineList):
        c.report(join_path(p, key), expected, describe(value), c.line_of(node, key))
        return []
    codes: list[int] = []
    for index, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= 255:
            c.report(
                f"{join_path(p, key)}[{index}]",
                "an exit code from 1 to 255",
                describe(item),
                value.item_lines[index],
            )
            return []
        codes.append(item)
    return codes
