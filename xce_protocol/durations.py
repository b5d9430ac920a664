"""Durations on command lines, read like the configs read them: `90`, `500ms`, `30s`, `10m`, `1h`.

One click parameter type for every duration flag of the three commands, on the same parser as
the config checker (validation.parse_duration), so `--drain-timeout 10m` means what
`drain_timeout: 10m` means in a config.
"""

from __future__ import annotations

from typing import Any

import click

from xce_protocol.validation import MAX_DURATION, parse_duration


class Duration(click.ParamType):  # type: ignore[type-arg]  # generic only in new click
    """Seconds, as a float, from a number or a `30s`-style string within bounds."""

    name = "duration"

    def __init__(self, minimum: float = 0.0, maximum: float = MAX_DURATION) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):  # a default, already seconds
            return value
        seconds = parse_duration(value if isinstance(value, str) else str(value))
        if seconds is None or not self.minimum <= seconds <= self.maximum:
            self.fail(
                f"expected a duration from {_human(self.minimum)} to {_human(self.maximum)} "
                f"(seconds, or like 500ms, 30s, 10m, 1h), got {value!r}",
                param,
                ctx,
            )
        return seconds


def _human(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
