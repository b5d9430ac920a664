"""`python -m bench --readme README.md` replaces exactly the tables between their markers.

A README whose prose and tables drifted apart is what the markers end: a run rewrites what is
between `<!-- bench:SECTION -->` and `<!-- /bench:SECTION -->` and nothing else, and a missing
marker is an error before the run, not a table silently left stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench import readme
from bench.__main__ import SECTIONS

README = """\
# Title

Prose that quotes no figure.

<!-- bench:flood -->
```
Output flood, 2026-11-30
old row 1
```
<!-- /bench:flood -->

Between the tables.

<!-- bench:leases -->
```
old leases
```
<!-- /bench:leases -->
Trailing text, no newline at the end"""


def between(text: str, start: str, end: str) -> str:
    return text.split(start, maxsplit=1)[1].split(end, maxsplit=1)[0]


def test_the_content_between_the_markers_is_replaced_exactly() -> None:
    block = "python -m bench, 2026-12-02\nOutput flood, 2026-12-02\nrow  1.0 ms\n\nsecond part"
    out = readme.replace(README, {"flood": block + "\n"})
    assert between(out, "<!-- bench:flood -->\n", "<!-- /bench:flood -->") == (
        f"```\n{block}\n```\n"
    )
    assert "old row 1" not in out


def test_text_outside_the_markers_is_untouched() -> None:
    out = readme.replace(README, {"flood": "new", "leases": "new leases"})
    head = "<!-- bench:flood -->"
    assert out.split(head, maxsplit=1)[0] == README.split(head, maxsplit=1)[0]
    gap = ("<!-- /bench:flood -->", "<!-- bench:leases -->")
    assert between(out, *gap) == between(README, *gap)
    assert out.endswith("<!-- /bench:leases -->\nTrailing text, no newline at the end")
    assert readme.replace(out, {"flood": "new", "leases": "new leases"}) == out  # idempotent


def test_a_section_not_run_keeps_its_table() -> None:
    out = readme.replace(README, {"leases": "new leases"})
    assert "old row 1" in out and "old leases" not in out


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (README.replace("<!-- bench:leases -->\n", ""), "no <!-- bench:leases -->"),
        (README.replace("<!-- /bench:leases -->", ""), "no <!-- /bench:leases -->"),
        (README + "\n<!-- bench:leases -->\n", "more than once"),
        (
            README.replace("<!-- bench:leases -->", "@")
            .replace("<!-- /bench:leases -->", "<!-- bench:leases -->")
            .replace("@", "<!-- /bench:leases -->"),
            "before",
        ),
    ],
)
def test_missing_or_misplaced_markers_are_a_clear_error(text: str, problem: str) -> None:
    with pytest.raises(readme.MarkerError, match=problem):
        readme.replace(text, {"flood": "new", "leases": "new"})
    with pytest.raises(readme.MarkerError, match=problem):
        readme.check(text, ["leases"])


def test_every_error_is_named_at_once() -> None:
    with pytest.raises(readme.MarkerError) as raised:
        readme.check(README, ["ha", "never-two", "flood"])
    assert "bench:ha" in str(raised.value) and "bench:never-two" in str(raised.value)
    assert "flood" not in str(raised.value)


def test_a_code_fence_in_a_table_is_refused() -> None:
    with pytest.raises(readme.MarkerError, match="code fence"):
        readme.replace(README, {"flood": "```\nsneaky\n```"})


def test_the_repository_readme_has_the_markers_of_every_bench_section() -> None:
    """`make bench` checks them before it runs; this keeps them from being edited away."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    readme.check(text, [*SECTIONS, "never-two"])


def test_a_run_rewrites_the_tables_it_printed_and_keeps_the_skipped_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import bench.__main__ as cli
    from bench import Skipped

    def run(section: str, args: object) -> str:
        if section == "leases":
            raise Skipped("needs what this machine lacks")
        return "Output flood, today\nrow  1.0 ms"

    target = tmp_path / "README.md"
    target.write_text(README)
    monkeypatch.setattr(cli, "run", run)
    monkeypatch.setattr(sys, "argv", ["bench", "flood", "leases", "--readme", str(target)])
    cli.main()
    out = target.read_text()
    printed = capsys.readouterr().out
    assert "leases: skipped (needs what this machine lacks)" in printed
    assert "old leases" in out and "old row 1" not in out
    body = between(out, "<!-- bench:flood -->\n```\n", "```\n<!-- /bench:flood -->")
    header, table = body.split("\n", 1)
    assert header.startswith("python -m bench, ") and "commit " in header
    assert "load average " in header and " at its end" in header
    assert table == "Output flood, today\nrow  1.0 ms\n"


def test_a_missing_marker_fails_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bench.__main__ as cli

    def run(section: str, args: object) -> str:
        raise AssertionError("ran before the markers were checked")

    target = tmp_path / "README.md"
    target.write_text(README)
    monkeypatch.setattr(cli, "run", run)
    monkeypatch.setattr(sys, "argv", ["bench", "ha", "--readme", str(target)])
    with pytest.raises(readme.MarkerError, match="bench:ha"):
        cli.main()
    assert target.read_text() == README
