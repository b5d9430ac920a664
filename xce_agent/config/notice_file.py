"""The notice file a component that asks for notices (`notice_signal`) is told of: its path,
named in the component's environment as XCE_NOTICE_FILE (notices/relay.py writes it)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from xce_agent.supervision.spec import ComponentSpec

ENV = "XCE_NOTICE_FILE"


def with_notice_file(spec: ComponentSpec, state_directory: Path) -> ComponentSpec:
    """The spec with XCE_NOTICE_FILE in its environment when it asks for notices."""
    if spec.notice_signal is None:
        return spec
    env = {**spec.environment, ENV: str(notice_path(spec, state_directory))}
    return replace(spec, environment=env)


def notice_path(spec: ComponentSpec, state_directory: Path) -> Path:
    return state_directory / f"notice-{spec.name}.json"
