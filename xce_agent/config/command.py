"""A component's (or an exec probe's) command: a list of words or one shell-like string.

The first word must be an executable found on the PATH the component will run with, so a
typo is a config error at validation instead of a restart loop. With a `user:`, "executable"
means by that user (program_access.py), not by root who validates.
"""

from __future__ import annotations

import os
import shlex
import shutil

from xce_agent.config.program_access import Account, Verdict, find_program
from xce_protocol.validation import Checker, describe, join_path
from xce_protocol.yamlsource import LineDict, LineList


def parse_command(
    node: LineDict,
    key: str,
    p: str,
    c: Checker,
    env: dict[str, str],
    runs_as: Account | None = None,
) -> list[str] | None:
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
    if runs_as is not None:
        return (
            argv
            if _runnable_by(runs_as, argv[0], search, c, join_path(p, key), node, key)
            else None
        )
    if shutil.which(argv[0], path=search) is None:
        c.report(
            join_path(p, key),
            "an executable program as the first word",
            f"{argv[0]!r}, which is not an executable found on PATH",
            c.line_of(node, key),
        )
        return None
    return argv


def _runnable_by(
    who: Account, word: str, search: str, c: Checker, where: str, node: LineDict, key: str
) -> bool:
    found = find_program(word, search, who)
    if found.verdict is Verdict.OK:
        return True
    expected = f"a program user {who.name!r} may run"
    if found.verdict is Verdict.MISSING:
        got = f"{word!r}, which is not an executable found on PATH"
    else:
        got = f"{found.path!r}: {found.why}"
    c.report(where, expected, got, c.line_of(node, key))
    return False
