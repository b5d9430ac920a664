"""monitoring/alerts.yml is a valid rule file and its alerts fire when, and only when, they
should (promtool test rules against monitoring/alerts_test.yml)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

MONITORING = Path(__file__).resolve().parents[2] / "monitoring"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not installed (Debian package prometheus; make e2e-deps)")
    return found


def test_rules_check() -> None:
    out = subprocess.run(
        [promtool(), "check", "rules", str(MONITORING / "alerts.yml")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 11 rules found" in out.stdout


def test_rules_fire_on_their_cases_only() -> None:
    out = subprocess.run(
        [promtool(), "test", "rules", "alerts_test.yml"],
        capture_output=True,
        text=True,
        cwd=MONITORING,
    )
    assert out.returncode == 0, out.stdout + out.stderr
