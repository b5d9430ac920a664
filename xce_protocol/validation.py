"""Collect every problem of a YAML document, one line each, with path, expectation and line.

The agent's and the controller's configs are both checked with this: a checker walks the
document, each getter records a problem instead of raising, and the caller reports them all.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any, overload

from xce_protocol.yamlsource import LineDict, LineList

_MISSING = object()
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", re.ASCII)  # ASCII digits only
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
# The longest duration any config accepts: 7 days. Timers built from it stay far below the
# 2**31 ms that poll/epoll and most platforms' timers take, and every value is finite.
MAX_DURATION = 7 * 86400.0


def describe(value: object) -> str:
    """How a bad value is shown in a message: short, typed, never a secret."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def join_path(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


class Checker:
    """Walks a document and collects `path: expected X, got Y (file line N)` lines."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.problems: list[str] = []

    def report(self, path: str, expected: str, got: str, line: int) -> None:
        where = f" ({self.origin} line {line})" if line else f" ({self.origin})"
        self.problems.append(f"{path}: expected {expected}, got {got}{where}")

    def line_of(self, parent: LineDict, key: str) -> int:
        return parent.key_lines.get(key, parent.line)

    def allowed_keys(self, node: LineDict, path: str, allowed: Iterable[str]) -> None:
        names = sorted(allowed)
        for key in node:
            if key not in names:
                self.report(
                    join_path(path, key),
                    f"one of the keys {', '.join(names)}",
                    f"unknown key {str(key)!r}",
                    node.key_lines.get(key, node.line),
                )

    def _get(self, parent: LineDict, key: str, path: str, expected: str, required: bool) -> Any:
        if key not in parent:
            if required:
                self.report(join_path(path, key), expected, "nothing", parent.line)
            return _MISSING
        return parent[key]

    def mapping(
        self, parent: LineDict, key: str, path: str, required: bool = True
    ) -> LineDict | None:
        value = self._get(parent, key, path, "a mapping", required)
        if value is _MISSING:
            return None
        if not isinstance(value, LineDict):
            self.report(
                join_path(path, key), "a mapping", describe(value), self.line_of(parent, key)
            )
            return None
        return value

    def string(
        self,
        parent: LineDict,
        key: str,
        path: str,
        required: bool = True,
        default: str | None = None,
        pattern: re.Pattern[str] | None = None,
        expected: str = "a non-empty string",
    ) -> str | None:
        value = self._get(parent, key, path, expected, required)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            self.report(join_path(path, key), expected, describe(value), self.line_of(parent, key))
            return None
        text = str(value)
        bad = not text.strip() or "\x00" in text
        if bad or (pattern is not None and not pattern.fullmatch(text)):
            self.report(join_path(path, key), expected, describe(value), self.line_of(parent, key))
            return None
        return text

    def mark(self) -> int:
        """Where the problems stand now: `failed_since(mark)` tells whether a part added any."""
        return len(self.problems)

    def failed_since(self, mark: int) -> bool:
        return len(self.problems) > mark

    # A getter with a default returns it after reporting a bad value, so its caller builds on
    # a value of the right type and `problems` alone decides whether the document is taken.
    @overload
    def integer(
        self,
        parent: LineDict,
        key: str,
        path: str,
        default: int,
        minimum: int | None = None,
        maximum: int | None = None,
        required: bool = False,
    ) -> int: ...

    @overload
    def integer(
        self,
        parent: LineDict,
        key: str,
        path: str,
        default: None = None,
        minimum: int | None = None,
        maximum: int | None = None,
        required: bool = False,
    ) -> int | None: ...

    def integer(
        self,
        parent: LineDict,
        key: str,
        path: str,
        default: int | None = None,
        minimum: int | None = None,
        maximum: int | None = None,
        required: bool = False,
    ) -> int | None:
        got = self._numeric(parent, key, path, minimum, maximum, required, integer=True)
        return default if got is None else int(got)

    @overload
    def number(
        self,
        parent: LineDict,
        key: str,
        path: str,
        default: float,
        minimum: float | None = None,
        maximum: float | None = None,
        required: bool = False,
    ) -> float: ...

    @overload
    def number(
        self,
        parent: LineDict,
        key: str,
        path: str,
        default: None = None,
        minimum: float | None = None,
        maximum: float | None = None,
        required: bool = False,
    ) -> float | None: ...

    def number(
        self,
        parent: LineDict,
        key: str,
        path: str,
        default: float | None = None,
        minimum: float | None = None,
        maximum: float | None = None,
        required: bool = False,
    ) -> float | None:
        got = self._numeric(parent, key, path, minimum, maximum, required, integer=False)
        return default if got is None else float(got)

    def _numeric(
        self,
        parent: LineDict,
        key: str,
        path: str,
        minimum: float | None,
        maximum: float | None,
        required: bool,
        integer: bool,
    ) -> float | None:
        """The value at `key` when it is an integer (or any finite number) within the bounds;
        None when it is missing or was reported."""
        expected = _range_text("an integer" if integer else "a number", minimum, maximum)
        value = self._get(parent, key, path, expected, required)
        if value is _MISSING:
            return None
        kinds = (int,) if integer else (int, float)
        ok = isinstance(value, kinds) and not isinstance(value, bool)
        # A huge integer overflows isfinite; an integer is finite anyway.
        ok = ok and (isinstance(value, int) or math.isfinite(value))
        ok = ok and (minimum is None or value >= minimum)
        ok = ok and (maximum is None or value <= maximum)
        if not ok:
            self.report(join_path(path, key), expected, describe(value), self.line_of(parent, key))
            return None
        return float(value) if not integer else int(value)

    @overload
    def duration(
        self,
        parent: LineDict,
        key: str,
        path: str,
        default: float,
        minimum: float = 0.0,
        positive: bool = False,
        required: bool = False,
        maximum: float = MAX_DURATION,
    ) -> float: ...

    @overload
    def duration(
        self,
        parent: LineDict,
        key: str,
        path: str,
        default: None = None,
        minimum: float = 0.0,
        positive: bool = False,
        required: bool = False,
        maximum: float = MAX_DURATION,
    ) -> float | None: ...

    def duration(
        self,
        parent: LineDict,
        key: str,
        path: str,
        default: float | None = None,
        minimum: float = 0.0,
        positive: bool = False,
        required: bool = False,
        maximum: float = MAX_DURATION,
    ) -> float | None:
        """Seconds, given as a number or as '500ms', '30s', '5m', '1h'; finite, <= maximum."""
        low = "greater than 0 and at most" if positive else f"from {minimum:g}s to"
        expected = f"a duration {low} {_human(maximum)} (seconds, or like 500ms, 30s, 5m, 1h)"
        value = self._get(parent, key, path, expected, required)
        if value is _MISSING:
            return default
        seconds = parse_duration(value)
        bad = seconds is None or seconds < minimum or (positive and seconds <= 0)
        bad = bad or seconds is None or seconds > maximum
        if bad or seconds is None:
            self.report(join_path(path, key), expected, describe(value), self.line_of(parent, key))
            return default
        return seconds

    @overload
    def choice(
        self,
        parent: LineDict,
        key: str,
        path: str,
        choices: Iterable[str],
        default: str,
        required: bool = False,
    ) -> str: ...

    @overload
    def choice(
        self,
        parent: LineDict,
        key: str,
        path: str,
        choices: Iterable[str],
        default: None = None,
        required: bool = False,
    ) -> str | None: ...

    def choice(
        self,
        parent: LineDict,
        key: str,
        path: str,
        choices: Iterable[str],
        default: str | None = None,
        required: bool = False,
    ) -> str | None:
        options = list(choices)
        expected = f"one of {', '.join(options)}"
        value = self._get(parent, key, path, expected, required)
        if value is _MISSING:
            return default
        if not isinstance(value, str) or value not in options:
            self.report(join_path(path, key), expected, describe(value), self.line_of(parent, key))
            return default
        return value

    def string_list(
        self, parent: LineDict, key: str, path: str, required: bool = False
    ) -> list[str] | None:
        expected = "a list of non-empty strings"
        value = self._get(parent, key, path, expected, required)
        if value is _MISSING:
            return [] if not required else None
        if not isinstance(value, LineList):
            self.report(join_path(path, key), expected, describe(value), self.line_of(parent, key))
            return None
        result: list[str] = []
        for index, item in enumerate(value):
            if (
                isinstance(item, bool)
                or not isinstance(item, (str, int, float))
                or item == ""
                or "\x00" in str(item)
            ):
                self.report(
                    f"{join_path(path, key)}[{index}]",
                    "a non-empty string",
                    describe(item),
                    value.item_lines[index],
                )
                return None
            result.append(str(item))
        return result

    def string_map(self, parent: LineDict, key: str, path: str) -> dict[str, str] | None:
        node = self.mapping(parent, key, path, required=False)
        if node is None:
            return {} if key not in parent else None
        result: dict[str, str] = {}
        for name, value in node.items():
            scalar = isinstance(value, (str, int, float)) and not isinstance(value, bool)
            if not scalar or "\x00" in str(value):
                self.report(
                    join_path(join_path(path, key), name),
                    "a string without NUL",
                    describe(value),
                    node.key_lines.get(name, node.line),
                )
                continue
            result[str(name)] = str(value)
        return result


def parse_duration(value: object) -> float | None:
    """Seconds from a number or a '30s'-style string; None when it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str) and len(value) <= 40:
        match = _DURATION.fullmatch(value)
        if match:
            seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            return seconds if math.isfinite(seconds) else None
    return None


def _human(seconds: float) -> str:
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _range_text(kind: str, minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f"{kind} from {_bound(minimum)} to {_bound(maximum)}"
    if minimum is not None:
        return f"{kind} >= {_bound(minimum)}"
    if maximum is not None:
        return f"{kind} <= {_bound(maximum)}"
    return kind


def _bound(value: float) -> str:
    # Exact for whole numbers: tasks_max's 4194304 read "4.1943e+06" with :g.
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
