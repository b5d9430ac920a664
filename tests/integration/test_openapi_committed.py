"""docs/openapi.json is the contract: it must be what the code serves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_committed_openapi_matches_the_code() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "xce_controller", "openapi"],
        capture_output=True,
        text=True,
        check=True,
    )
    committed = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert json.loads(out.stdout) == committed, "run: xce-controller openapi > docs/openapi.json"
