"""The options several `xce-agent` verbs share, and reading the config they name."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import click

from xce_agent.config.agent import AgentConfig, config_path, load_config
from xce_protocol.durations import Duration

config_option = click.option(
    "--config",
    "config_file",
    metavar="FILE",
    help="Agent config (default: $XCE_AGENT_CONFIG, else /etc/xce/agent.yaml).",
)


def load(config_file: str | None) -> AgentConfig:
    """The config `--config` names (else $XCE_AGENT_CONFIG, else the default), validated."""
    return load_config(config_path(config_file))


F = TypeVar("F", bound=Callable[..., Any])


def timeout_option(default: str) -> Callable[[F], F]:
    return click.option(
        "--timeout",
        type=Duration(),
        default=default,
        show_default=True,
        help="How long to wait (like 2m).",
    )
