"""The configs the benchmarks write are ones the agent accepts.

The supervision section once wrote `give_up: {starts: 1000000}`, which the config's bound
refuses: the agent never started and `make bench` failed as shipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import flood, supervision
from xce_agent.config.agent import load_config


@pytest.mark.parametrize("crash", [False, True])
def test_the_supervision_bench_config_validates(tmp_path: Path, crash: bool) -> None:
    child = tmp_path / "child"
    child.write_text("#!/bin/sh\n")
    child.chmod(0o755)
    path = supervision.agent_config(tmp_path, child, {"A": "1"}, crash)
    config = load_config(path, instance_data=tmp_path / "none.json")
    assert config.roles  # the input arrived


@pytest.mark.parametrize("words", [None, ["/bin/sh", "-c", "true"]])
def test_the_flood_bench_config_validates(tmp_path: Path, words: list[str] | None) -> None:
    child = tmp_path / "child"
    child.write_text("#!/bin/sh\n")
    child.chmod(0o755)
    path = flood._config(tmp_path, child, tmp_path / "log", words)
    assert load_config(path, instance_data=tmp_path / "none.json").roles
