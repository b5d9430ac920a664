"""The import contracts bite: a violating import, planted in a copy of the tree, breaks them.

`make lint` runs lint-imports on the real tree; this test proves the contracts of
pyproject.toml would fail on a pure core that imports I/O or a shell, on an import cycle and on
a layer imported upwards, and pass on the tree as it is.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("xce_protocol", "xce_agent", "xce_controller")
LINT = Path(sys.executable).with_name("lint-imports")


def copy_tree(into: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, into / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", into / "pyproject.toml")
    return into


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def plant(tree: Path, module: str, line: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    text = path.read_text()
    head, sep, rest = text.partition("from __future__ import annotations\n")
    path.write_text(head + sep + line + "\n" + rest)


pytestmark = pytest.mark.skipif(not LINT.exists(), reason="lint-imports is not installed")


def test_the_tree_as_it_is_keeps_every_contract(tmp_path: Path) -> None:
    result = lint(copy_tree(tmp_path))
    assert result.returncode == 0, result.stdout
    assert "BROKEN" not in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("xce_agent.core.membership", "import socket", "the agent's pure core"),
        ("xce_agent.core.lease_holder", "import xce_agent.state", "the agent's pure core"),
        ("xce_agent.supervision.machine_messages", "import subprocess", "the agent's pure core"),
        ("xce_agent.supervision.component_state", "import threading", "the agent's pure core"),
        ("xce_controller.core.facts", "import sqlite3", "the controller's pure core"),
        ("xce_controller.core.lifecycle", "import xce_controller.service", "pure core"),
        ("xce_controller.store.sqlite", "import xce_controller.http.api", "layers"),
        ("xce_agent.config.agent", "import xce_agent.operator.verbs", "no import cycles"),
    ],
)
def test_a_violating_import_breaks_its_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    tree = copy_tree(tmp_path)
    plant(tree, module, line)
    result = lint(tree)
    assert result.returncode != 0
    broken = [row for row in result.stdout.splitlines() if "BROKEN" in row]
    assert broken, result.stdout
    assert contract in result.stdout.split("Broken contracts", 1)[-1] or any(
        contract in row for row in broken
    ), result.stdout
