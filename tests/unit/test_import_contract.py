"""The one-way dependency (agent and controller import only the protocol) is enforced, not hoped."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _tree(tmp_path: Path) -> Path:
    for package in ("xce_protocol", "xce_agent", "xce_controller"):
        shutil.copytree(ROOT / package, tmp_path / package)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True
    )


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")
@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("xce_agent/agent.py", "import xce_controller.core.jobs"),
        ("xce_controller/core/jobs.py", "from xce_agent import state"),
        ("xce_protocol/roles.py", "import xce_agent.errors"),
    ],
)
def test_a_violating_import_breaks_the_contract(tmp_path: Path, module: str, line: str) -> None:
    tree = _tree(tmp_path)
    assert _lint(tree).returncode == 0
    with (tree / module).open("a", encoding="utf-8") as handle:
        handle.write(f"\n{line}  # noqa\n")
    result = _lint(tree)
    assert result.returncode != 0, result.stdout
    assert "BROKEN" in result.stdout
