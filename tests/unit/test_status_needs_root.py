"""`status` as a user other than root says it needs root, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from xce_agent import cli


def test_status_without_root_says_it_needs_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a user sees: the token file (root's, 0600) cannot be read, a config error.
    config = tmp_path / "agent.yaml"
    config.write_text(
        "version: 1\ninstance: {id: i-1}\n"
        f"controller: {{url: 'http://127.0.0.1:1', token_file: {tmp_path / 'unreadable'}}}\n"
        f"state_directory: {tmp_path / 'state'}\n"
    )
    runner = CliRunner()
    as_root = runner.invoke(cli.main, ["status", "--config", str(config)])
    assert as_root.exit_code == 78 and "token_file" in as_root.output  # the input arrived
    monkeypatch.setattr("xce_agent.cli.os.geteuid", lambda: 1000)
    out = runner.invoke(cli.main, ["status", "--config", str(config)])
    assert out.exit_code == 1, out.output
    assert out.output.strip() == (
        "xce-agent: status needs root: the state and the config are root's (try sudo)"
    )
