"""Times on the wire (RFC 3339 since protocol 1.2, epoch seconds before) and durations on
command lines (like the configs)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from xce_protocol.durations import Duration
from xce_protocol.times import parse_time, rfc3339


def test_rfc3339_is_utc_to_the_millisecond_and_reads_back() -> None:
    assert rfc3339(1796113320.0) == "2026-12-01T08:22:00.000Z"
    assert rfc3339(1796113320.9996) == "2026-12-01T08:22:01.000Z"
    assert parse_time(rfc3339(1796113320.25)) == 1796113320.25


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (1796113320, 1796113320.0),
        (1796113320.5, 1796113320.5),
        ("2026-12-01T08:22:00Z", 1796113320.0),
        ("2026-12-01T08:22:00.5Z", 1796113320.5),
        ("2026-12-01T09:22:00+01:00", 1796113320.0),
        ("2026-12-01t08:22:00.123456789z", 1796113320.123456789),
        ("2026-12-01T08:22:00", None),  # no zone: not RFC 3339
        ("yesterday", None),
        ("2026-13-01T08:22:00Z", None),
        (True, None),
        (float("nan"), None),
        (-1, None),
        (1e12, None),
        (None, None),
    ],
)
def test_both_time_forms_are_read(value: object, seconds: float | None) -> None:
    got = parse_time(value)
    assert got == pytest.approx(seconds) if seconds is not None else got is None


@click.command()
@click.option("--wait", type=Duration(maximum=3600), default="1m")
def waits(wait: float) -> None:
    click.echo(repr(wait))


@pytest.mark.parametrize(
    ("arg", "seconds"), [("90", 90.0), ("500ms", 0.5), ("10m", 600.0), ("1h", 3600.0)]
)
def test_duration_flags_read_like_the_configs(arg: str, seconds: float) -> None:
    out = CliRunner().invoke(waits, ["--wait", arg])
    assert out.exit_code == 0 and out.output.strip() == repr(seconds)


@pytest.mark.parametrize("arg", ["10 minutes", "2h", "-1s", "1d", ""])
def test_a_bad_duration_is_a_usage_error(arg: str) -> None:
    out = CliRunner().invoke(waits, ["--wait", arg])
    assert out.exit_code == 2
    assert "expected a duration from 0s to 1h (seconds, or like 500ms, 30s, 10m, 1h)" in out.output
    assert CliRunner().invoke(waits, []).output.strip() == "60.0"
