"""The `xce-agent` command: the only place where errors become messages and exit codes.

Commands raise typed errors; the group (xce_protocol.exits) prints each as one line and exits
with its code: 0 ok; 1 runtime failure; 2 usage; 3 `status` found no state; 78 (EX_CONFIG)
config error, so a systemd unit with RestartPreventExitStatus=78 does not loop on it.

This module is the group and the verbs that drive the agent (run, stop, start, restart, reset,
reload); `status` and `render-user-data` have a module each, the shared options another.
"""

from __future__ import annotations

import sys

import click

from xce_agent import __version__
from xce_agent.cli.options import config_option, load, timeout_option
from xce_agent.cli.status_command import status
from xce_agent.cli.user_data_command import render_user_data
from xce_agent.config.agent import config_path, load_config
from xce_agent.errors import ConfigError, UsageError
from xce_protocol.durations import Duration
from xce_protocol.exits import ErrorExits

EX_CONFIG = ConfigError.exit_code


@click.group(cls=ErrorExits, name="xce-agent")
@click.version_option(__version__, prog_name="xce-agent")
def main() -> None:
    """Node agent of elastic XCE hosts: joins the controller, supervises the worker."""


@main.command()
@config_option
def validate(config_file: str | None) -> None:
    """Check the config; print every problem, one per line, or "ok"."""
    path = config_path(config_file)
    try:
        load_config(path)
    except ConfigError as exc:
        for problem in exc.problems:
            click.echo(problem)
        sys.exit(EX_CONFIG)
    click.echo(f"{path}: ok")


@main.command()
@config_option
def run(config_file: str | None) -> None:
    """Run the agent in the foreground (what the systemd unit starts)."""
    from xce_agent.system import start_signals

    held = start_signals.hold()  # first: a SIGHUP while starting must not end the agent
    from xce_agent.system.logsetup import configure

    config = load(config_file)
    configure(config.log_level)
    from xce_agent.agent import Agent
    from xce_agent.system.notify import SystemdNotifier

    sys.exit(Agent(config, SystemdNotifier(), held=held).run())


@main.command()
@config_option
@timeout_option("2m")
@click.option(
    "--drain-timeout",
    type=Duration(),
    default=None,
    help="Without NAME: how long a joined host may drain its jobs before the worker stops "
    "(default: controller.drain_on_stop).",
)
@click.option(
    "--no-drain",
    is_flag=True,
    help="Without NAME: stop at once, without telling the controller (the host is then lost "
    "after the grace).",
)
@click.argument("name", required=False)
def stop(
    config_file: str | None,
    timeout: float,
    drain_timeout: float | None,
    no_drain: bool,
    name: str | None,
) -> None:
    """Stop NAME, or without NAME every component and then the agent (a restart keeps them).

    Without NAME a joined agent first tells the controller (a planned stop): the host is
    closed, its jobs may finish for up to the drain timeout, then the worker stops. The
    host is not taken for lost, and reopens when the agent starts again."""
    if name and (drain_timeout is not None or no_drain):
        raise UsageError("--drain-timeout and --no-drain stop the whole host: not with NAME")
    if drain_timeout is not None and no_drain:
        raise UsageError("either --drain-timeout or --no-drain, not both")
    if name:
        _control(config_file, "stop", name, timeout)
        return
    from xce_agent.operator.stopping import stop_host

    drain = 0.0 if no_drain else drain_timeout
    click.echo(f"xce-agent: {stop_host(load(config_file), timeout, drain)}")


def _component_verb(verb: str, doc: str) -> None:
    """`xce-agent VERB NAME`: one component, through the running agent."""

    def command(config_file: str | None, timeout: float, name: str) -> None:
        _control(config_file, verb, name, timeout)

    command.__doc__ = doc
    wrapped = click.argument("name")(command)
    wrapped = timeout_option("1m")(wrapped)
    main.command(verb)(config_option(wrapped))


for _verb, _doc in (
    ("start", "Start component NAME through the running agent."),
    ("restart", "Restart component NAME (stop gracefully, start again) through the running agent."),
    ("reset", "Clear the FATAL state of component NAME and start it again."),
):
    _component_verb(_verb, _doc)


@main.command()
@config_option
def reload(config_file: str | None) -> None:
    """Validate the config, then apply it: added, removed and changed components."""
    _control(config_file, "reload", "", 30.0)


def _control(config_file: str | None, command: str, name: str, timeout: float) -> None:
    from xce_agent.operator.client import run_command

    click.echo(f"xce-agent: {run_command(load(config_file), command, name, timeout)}")


@main.command("sample-worker")
def sample_worker() -> None:
    """Stand-in for XCE's worker daemon (reads the template the agent hands it)."""
    from xce_agent.sample_worker import main as worker_main

    sys.exit(worker_main())


@main.command()
def demo() -> None:
    """Show the elastic-host lifecycle end to end on this machine (about 20 s)."""
    from xce_agent.operator.demo import launch_demo

    sys.exit(launch_demo(click.echo))


main.add_command(status)
main.add_command(render_user_data)
