"""Errors become one line and their exit code in main() of the agent's command line, nowhere else.

The controller's command lines: test_controller_exits.py (this file runs under Python 3.9 too).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from xce_agent.cli import main as agent_main
from xce_agent.errors import StopTimedOut
from xce_agent.operator.client import OperatorError
from xce_agent.operator.stopping import StopFailed
from xce_agent.sample_worker import DECOMMISSIONED_EXIT, Decommissioned
from xce_protocol.errors import XceError

ROOT = Path(__file__).resolve().parents[2]
# Command lines: the click programs, and the fence (its own small program, started by the
# agent for each singleton component).
CLI_LAYER = {
    "xce_agent/cli/__init__.py",
    "xce_agent/singletons/fence.py",
    "xce_controller/cli/controller.py",
    "xce_controller/cli/xcecli.py",
}


def _runner() -> CliRunner:
    # click 8.2 keeps stderr apart by default and dropped the argument; click 7 needs it.
    separate = "mix_stderr" in inspect.signature(CliRunner).parameters
    return CliRunner(mix_stderr=False) if separate else CliRunner()  # type: ignore[call-arg]


def _one_line(result: object, prefix: str) -> str:
    lines = result.stderr.splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{prefix}: ")
    assert "Traceback" not in result.output  # type: ignore[attr-defined]
    return str(lines[0])


def test_status_without_state_is_exit_3(tmp_path: Path) -> None:
    result = _runner().invoke(agent_main, ["status", "--state-dir", str(tmp_path)])
    assert result.exit_code == 3
    assert "the agent has not run here" in _one_line(result, "xce-agent")


def test_a_bad_controller_url_is_a_usage_error() -> None:
    result = _runner().invoke(agent_main, ["render-user-data", "--controller-url", "ftp://x"])
    assert result.exit_code == 2
    assert "--controller-url" in _one_line(result, "xce-agent")


def test_sample_worker_outside_the_agent_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("XCE_TEMPLATE_FILE", raising=False)
    result = _runner().invoke(agent_main, ["sample-worker"])
    assert result.exit_code == 2
    assert "XCE_TEMPLATE_FILE is not set" in _one_line(result, "xce-agent")


def test_a_config_error_prints_every_problem_and_exits_78(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("version: 1\nbogus: 1\n")
    result = _runner().invoke(agent_main, ["stop", "--config", str(config)])
    assert result.exit_code == 78
    assert result.stderr and all(
        line.startswith("xce-agent: ") for line in result.stderr.splitlines()
    )


def test_typed_errors_carry_their_exit_codes() -> None:
    assert Decommissioned("x").exit_code == DECOMMISSIONED_EXIT
    for error in (StopFailed, StopTimedOut, OperatorError):
        assert issubclass(error, XceError) and not issubclass(error, TimeoutError)
        assert error("x").exit_code == 1


def test_no_sys_exit_below_the_command_line_layer() -> None:
    found = []
    for package in ("xce_protocol", "xce_agent", "xce_controller"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if name in CLI_LAYER:
                continue
            if re.search(r"\bsys\.exit\(|\bSystemExit\b|\bos\._exit\(", path.read_text()):
                found.append(name)
    assert found == []
