"""`xce-agent status`: the agent's state as saved, and whether an agent is running to keep it.

It reads root's files: run by another user it says it needs root, in one line.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click

from xce_agent.cli.options import config_option, load
from xce_agent.errors import AgentError, ConfigError, NoState, StateNotPermitted


class NeedsRoot(AgentError):
    """A command that reads root's files, run as another user."""


@click.command()
@config_option
# No path_type: click 7 (Debian 11, the Python 3.9 distributions) does not have it. Not
# readable: a directory only root may read is the "needs root" line below, not a usage error.
@click.option("--state-dir", type=click.Path(readable=False), help="Read state from here.")
@click.option(
    "--json", "as_json", is_flag=True, help="Machine-readable output (times in RFC 3339, UTC)."
)
def status(config_file: str | None, state_dir: str | None, as_json: bool) -> None:
    """Show the agent's state: lifecycle, components, controller contact."""
    from xce_agent.operator.status import render_status
    from xce_agent.state import StateStore

    try:
        directory = Path(state_dir) if state_dir else load(config_file).state_directory
        state = StateStore(directory).read_only()
    except (ConfigError, StateNotPermitted):
        if os.geteuid() == 0:
            raise
        # The config's token file and the state directory are root's (0600, 0700).
        raise NeedsRoot(
            "status needs root: the state and the config are root's (try sudo)"
        ) from None
    if state is None:
        raise NoState(f"no state in {directory}: the agent has not run here")
    from xce_agent.system.single_agent import live_agent

    live = live_agent(state.agent)
    unsaved = _unsaved(directory) if live else ""
    if as_json:
        from xce_agent.operator.status_json import with_rfc3339_times

        data = with_rfc3339_times(state.to_json())
        data["agent_running"] = live
        data["stale"] = not live or bool(unsaved)
        data["state_unwritable"] = unsaved
        from xce_agent.operator.status import read_component_status

        own = read_component_status(directory, (c.name for c in state.components))
        data["component_status"] = {
            name: {"written": written, "lines": list(lines)}
            for name, (written, lines) in own.items()
        }
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        if unsaved:
            click.echo(
                f"{unsaved}\n(the running agent cannot save its state: shown is the last saved)"
            )
        from xce_agent.controller.credential import CredentialStore
        from xce_agent.operator.status import read_component_status

        own = read_component_status(directory, (c.name for c in state.components))
        click.echo(render_status(state, time.time(), live, CredentialStore(directory).peek(), own))


def _unsaved(directory: Path) -> str:
    """Why the running agent cannot save its state ("state_unwritable: ..."); "" if it can."""
    from xce_agent.operator.control import SOCKET_NAME, request

    try:
        answer = request(directory / SOCKET_NAME, "saving", "", 2.0)
    except OSError:
        return ""
    return "" if answer.ok or not answer.message.startswith("state_unwritable") else answer.message
