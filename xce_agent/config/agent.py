"""The agent's configuration (/etc/xce/agent.yaml, usually written by cloud-init).

`load_config` reads the file, checks every key and returns frozen dataclasses, or raises
ConfigError with one line per problem. Nothing here falls back to a default for a bad value.
Each section has its module (controller.py, instance.py, roles.py, cloud.py, metrics.py);
this one is the whole file: its top-level keys, its version and where it is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from xce_agent.config.cloud import NO_CLOUD, CloudConfig, parse_cloud
from xce_agent.config.controller import ControllerConfig, parse_controller
from xce_agent.config.controller_urls import loopback_url
from xce_agent.config.instance import InstanceConfig, parse_instance
from xce_agent.config.metrics import MetricsConfig, parse_metrics
from xce_agent.config.notice_file import with_notice_file
from xce_agent.config.roles import parse_roles
from xce_agent.errors import ConfigError
from xce_agent.supervision.spec import ComponentSpec
from xce_protocol.validation import Checker, describe
from xce_protocol.yamlsource import LineDict, SourceError, load_file

DEFAULT_CONFIG_PATH = Path("/etc/xce/agent.yaml")
DEFAULT_STATE_DIRECTORY = Path("/var/lib/xce-agent")
DEFAULT_INSTANCE_DATA = Path("/run/cloud-init/instance-data.json")
CONFIG_VERSION = 1

LOG_LEVELS = ("debug", "info", "warning", "error")
__all__ = ["AgentConfig", "ControllerConfig", "InstanceConfig", "load_config", "loopback_url"]


@dataclass(frozen=True)
class AgentConfig:
    path: Path
    instance: InstanceConfig
    roles: tuple[str, ...]
    components: tuple[ComponentSpec, ...]
    state_directory: Path = DEFAULT_STATE_DIRECTORY
    controller: ControllerConfig | None = None
    log_level: str = "info"
    version: int = CONFIG_VERSION
    cloud: CloudConfig = NO_CLOUD
    metrics: MetricsConfig = field(default_factory=MetricsConfig)


def config_path(option: str | None) -> Path:
    """--config wins, then XCE_AGENT_CONFIG, then the default."""
    if option:
        return Path(option)
    env = os.environ.get("XCE_AGENT_CONFIG")
    return Path(env) if env else DEFAULT_CONFIG_PATH


def load_config(path: Path, instance_data: Path = DEFAULT_INSTANCE_DATA) -> AgentConfig:
    """Read, validate and resolve the config; ConfigError lists every problem."""
    try:
        doc = load_file(path)
    except SourceError as exc:
        raise ConfigError([str(exc)]) from None
    checker = Checker(str(path))
    config = _parse(doc, checker, path, instance_data)
    if checker.problems or config is None:
        raise ConfigError(checker.problems)
    return config


def _parse(doc: LineDict, c: Checker, path: Path, instance_data: Path) -> AgentConfig | None:
    c.allowed_keys(
        doc,
        "",
        (
            "version",
            "controller",
            "instance",
            "roles",
            "state_directory",
            "log_level",
            "cloud",
            "metrics",
        ),
    )
    version = c.integer(doc, "version", "", required=True)
    if version is not None and version != CONFIG_VERSION:
        c.report("version", f"{CONFIG_VERSION}", describe(version), c.line_of(doc, "version"))
    controller = parse_controller(doc, c)
    instance = parse_instance(doc, c, instance_data)
    roles, components = parse_roles(doc, c, clustered="controller" in doc)
    state_dir = c.string(doc, "state_directory", "", required=False, expected="an absolute path")
    if state_dir is not None and not state_dir.startswith("/"):
        c.report(
            "state_directory",
            "an absolute path",
            describe(state_dir),
            doc.key_lines.get("state_directory", 0),
        )
    log_level = c.choice(doc, "log_level", "", LOG_LEVELS, default="info")
    cloud = parse_cloud(doc, c, instance_data)
    if instance is not None and instance.join_deadline is not None and "controller" not in doc:
        node = doc.get("instance")
        line = c.line_of(node, "join_deadline") if isinstance(node, LineDict) else 0
        c.report("instance.join_deadline", "a controller section (whom to join)", "none", line)
    metrics = parse_metrics(doc, c)
    if c.problems or instance is None or roles is None or components is None or log_level is None:
        return None
    state_directory = Path(state_dir) if state_dir else DEFAULT_STATE_DIRECTORY
    return AgentConfig(
        path=path,
        instance=instance,
        roles=roles,
        components=tuple(with_notice_file(spec, state_directory) for spec in components),
        state_directory=state_directory,
        controller=controller,
        log_level=log_level,
        cloud=cloud,
        metrics=metrics,
    )
