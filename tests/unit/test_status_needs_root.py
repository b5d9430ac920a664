"""`status` as a user other than root says it needs root, in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
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
    monkeypatch.setattr("xce_agent.cli.status_command.os.geteuid", lambda: 1000)
    out = runner.invoke(cli.main, ["status", "--config", str(config)])
    assert out.exit_code == 1, out.output
    assert out.output.strip() == (
        "xce-agent: status needs root: the state and the config are root's (try sudo)"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="runs status as another user: needs root")
def test_status_as_a_real_unprivileged_user_says_it_needs_root() -> None:
    # Not a patched geteuid: the real files as a package leaves them (token 0600, state 0700,
    # both root's), read by `nobody`.
    place = Path(tempfile.mkdtemp(prefix="xce-status-", dir="/tmp"))
    try:
        place.chmod(0o755)
        token = place / "join-token"
        token.write_text("a-join-token\n")
        token.chmod(0o600)
        state = place / "state"
        state.mkdir(mode=0o700)
        config = place / "agent.yaml"
        config.write_text(
            "version: 1\ninstance: {id: i-1}\n"
            f"controller: {{url: 'http://127.0.0.1:1', token_file: {token}}}\n"
            f"state_directory: {state}\n"
            "roles: {worker: {components: {w: {command: [/bin/sleep, '1']}}}}\n"
        )
        config.chmod(0o644)
        status = [sys.executable, "-m", "xce_agent", "status", "--config", str(config)]
        as_root = subprocess.run(status, capture_output=True, text=True, check=False)
        assert as_root.returncode == 3 and "no state in" in as_root.stderr  # the config read
        as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        for args in (status, [*status[:4], "--state-dir", str(state)]):
            out = subprocess.run([*as_nobody, *args], capture_output=True, text=True, check=False)
            assert out.returncode == 1, out
            assert out.stdout == ""
            assert out.stderr == (
                "xce-agent: status needs root: the state and the config are root's (try sudo)\n"
            )
    finally:
        shutil.rmtree(place)
