"""docs/architecture.md's picture of the imports is the one the code makes today."""

from __future__ import annotations

from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def test_the_import_map_in_the_doc_is_current() -> None:
    pytest.importorskip("grimp")  # with the test extras (import-linter)
    from tests.import_map import render

    text = DOC.read_text()
    shown = text.split("<!-- import-map -->\n```\n", 1)[1].split("```\n<!-- /import-map -->", 1)[0]
    assert shown == render(), "run .venv/bin/python -m tests.import_map and paste it in"
