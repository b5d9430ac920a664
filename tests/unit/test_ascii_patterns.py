"""Config values are read as whole ASCII strings: a trailing newline or a digit of another
script (which Python's int() and float() would happily read) is refused, not reinterpreted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xce_controller.core.config import load_cluster_config
from xce_protocol.errors import ConfigError
from xce_protocol.validation import parse_duration


def test_durations_take_ascii_digits_only() -> None:
    assert parse_duration("4s") == 4.0
    assert parse_duration(" 1.5 m ") == 90.0
    assert parse_duration("\u0664s") is None  # ARABIC-INDIC DIGIT FOUR
    assert parse_duration("\uff14s") is None  # FULLWIDTH DIGIT FOUR


def _cluster(tmp_path: Path, window: str) -> Path:
    path = tmp_path / "cluster.yaml"
    # JSON's escapes are YAML's double-quoted escapes: the file itself stays ASCII.
    path.write_text(
        f"version: 1\ntemplates:\n  default:\n    dispatch_windows: [{json.dumps(window)}]\n"
    )
    return path


def test_a_dispatch_window_is_the_whole_value(tmp_path: Path) -> None:
    load_cluster_config(_cluster(tmp_path, "Mon-Fri 08:00-18:00"))  # accepted as is
    for bad in ("22:00-06:00\n", "\u0662\u0662:00-06:00"):
        with pytest.raises(ConfigError) as raised:
            load_cluster_config(_cluster(tmp_path, bad))
        assert "dispatch_windows" in str(raised.value)
