"""The config keys `instance.join_deadline` and `instance.on_join_timeout`: what a host that
never joins does at its deadline (controller/join_deadline.py keeps the deadline and acts)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from xce_protocol.validation import Checker, describe, join_path
from xce_protocol.yamlsource import LineDict, LineList

POWEROFF = ("systemctl", "poweroff")


@dataclass(frozen=True)
class JoinTimeout:
    """What to do at the deadline: `poweroff`, `none`, or run `command`."""

    kind: str  # poweroff | none | command
    command: tuple[str, ...] = ()

    def argv(self) -> tuple[str, ...]:
        return POWEROFF if self.kind == "poweroff" else self.command


KEYS = ("join_deadline", "on_join_timeout")


def parse(node: LineDict, c: Checker) -> tuple[bool, float | None, JoinTimeout | None]:
    """`instance.join_deadline` and `instance.on_join_timeout`: (ok, deadline, action)."""
    p = "instance"
    deadline = c.duration(node, "join_deadline", p, minimum=5.0)
    if "join_deadline" in node and deadline is None:
        return False, None, None
    if "on_join_timeout" not in node:
        return True, deadline, JoinTimeout("poweroff") if deadline is not None else None
    value, line = node["on_join_timeout"], c.line_of(node, "on_join_timeout")
    path = join_path(p, "on_join_timeout")
    if deadline is None:
        c.report(path, "a join_deadline beside it (when to act)", "no join_deadline", line)
        return False, None, None
    if value in ("poweroff", "none"):
        return True, deadline, JoinTimeout(str(value))
    words = value if isinstance(value, LineList) else None
    if not words or not all(isinstance(w, str) and w and "\x00" not in w for w in words):
        c.report(path, "poweroff, none or a command (a list of strings)", describe(value), line)
        return False, None, None
    if shutil.which(words[0]) is None:
        c.report(path, "a command whose first word is an executable", repr(words[0]), line)
        return False, None, None
    return True, deadline, JoinTimeout("command", tuple(str(w) for w in words))
