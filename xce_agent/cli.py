"""The `xce-agent` command: the only place where errors become messages and exit codes.

Commands raise typed errors; the group (xce_protocol.exits) prints each as one line and exits
with its code: 0 ok; 1 runtime failure; 2 usage; 3 `status` found no state; 78 (EX_CONFIG)
config error, so a systemd unit with RestartPreventExitStatus=78 does not loop on it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

import click

from xce_agent import __version__
from xce_agent.config.agent import AgentConfig, config_path, load_config
from xce_agent.errors import AgentError, ConfigError, NoState, StateNotPermitted, UsageError
from xce_protocol.durations import Duration
from xce_protocol.exits import ErrorExits
from xce_protocol.roles import KNOWN_ROLES

EX_CONFIG = ConfigError.exit_code

config_option = click.option(
    "--config",
    "config_file",
    metavar="FILE",
    help="Agent config (default: $XCE_AGENT_CONFIG, else /etc/xce/agent.yaml).",
)


def _load(config_file: str | None) -> AgentConfig:
    return load_config(config_path(config_file))


class NeedsRoot(AgentError):
    """A command that reads root's files, run as another user."""


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

    config = _load(config_file)
    configure(config.log_level)
    from xce_agent.agent import Agent
    from xce_agent.system.notify import SystemdNotifier

    sys.exit(Agent(config, SystemdNotifier(), held=held).run())


@main.command()
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
        directory = Path(state_dir) if state_dir else _load(config_file).state_directory
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


F = TypeVar("F", bound=Callable[..., Any])


def timeout_option(default: str) -> Callable[[F], F]:
    return click.option(
        "--timeout",
        type=Duration(),
        default=default,
        show_default=True,
        help="How long to wait (like 2m).",
    )


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
    click.echo(f"xce-agent: {stop_host(_load(config_file), timeout, drain)}")


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

    click.echo(f"xce-agent: {run_command(_load(config_file), command, name, timeout)}")


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


def _check_controller_url(url: str, plain_http: bool) -> None:
    import urllib.parse

    from xce_agent.config.agent import loopback_url
    from xce_agent.config.controller_urls import URL

    # The agent's own rule (controller_urls.URL) and a host: else it could never join.
    if not URL.fullmatch(url) or not urllib.parse.urlsplit(url).hostname:
        raise UsageError(f"--controller-url: expected an http:// or https:// URL, got {url!r}")
    if url.startswith("http://") and not plain_http and not loopback_url(url):
        raise UsageError(
            f"--controller-url: expected an https:// URL (http:// only to loopback, "
            f"or with --plain-http), got {url!r}"
        )


@main.command("render-user-data")
@click.option(
    "--controller-url",
    default="",
    help="http(s) URL of the controller, or its replicas' URLs separated by commas (required).",
)
@click.option("--template", default="default", show_default=True, help="Host template.")
@click.option(
    "--role",
    "roles",
    multiple=True,
    default=("worker",),
    show_default=True,
    type=click.Choice(KNOWN_ROLES),
)
@click.option(
    "--instance-id",
    default="auto",
    show_default=True,
    help="The instance id, or auto (read from cloud-init's instance data).",
)
@click.option("--provider", default="", help="Provider name, shown by the controller.")
@click.option("--token-file", type=click.File("r"), help="File holding the join token (required).")
@click.option("--ca-file", type=click.File("r"), help="CA bundle for an https controller.")
@click.option(
    "--worker-command",
    default="/usr/sbin/xce-worker --foreground",
    show_default=True,
    help="The worker daemon's command line.",
)
@click.option(
    "--worker-user",
    default="",
    help="Run the worker as this user (created as a system user without a login shell).",
)
@click.option(
    "--cloud-notices",
    default="auto",
    show_default=True,
    type=click.Choice(("auto", "aws", "gce", "azure", "none")),
    help="Whose interruption notices to watch (auto: the cloud cloud-init names).",
)
@click.option(
    "--plain-http",
    is_flag=True,
    help="Allow an http:// controller URL beyond loopback (join token and credential in clear).",
)
@click.option(
    "--join-deadline",
    default="",
    metavar="DURATION",  # written into the config as given, after the same check as there
    help="Give up if not accepted this long after the first start (like 15m).",
)
@click.option(
    "--on-join-timeout",
    default=None,
    help="At the join deadline: poweroff (the default), none, or a command line.",
)
def render_user_data(
    controller_url: str,
    template: str,
    roles: tuple[str, ...],
    instance_id: str,
    provider: str,
    token_file: Any,
    ca_file: Any,
    worker_command: str,
    worker_user: str,
    cloud_notices: str,
    plain_http: bool,
    join_deadline: str,
    on_join_timeout: str | None,
) -> None:
    """Print cloud-init user-data that installs the config and starts the agent."""
    from xce_agent.operator.userdata import UserData, render, token_problem, user_name_problem
    from xce_protocol.validation import MAX_DURATION, parse_duration

    if not controller_url.strip():
        raise UsageError(
            "--controller-url: expected the controller's URL (without it no join could succeed)"
        )
    urls = [url.strip().rstrip("/") for url in controller_url.split(",")]
    for url in urls:  # one URL, or the replicas' comma-separated list (controller.url: [...])
        _check_controller_url(url, plain_http)
    seconds = parse_duration(join_deadline) if join_deadline else 5.0
    if seconds is None or not 5 <= seconds <= MAX_DURATION:
        raise UsageError(
            "--join-deadline: expected a duration from 5s to 168h (like 15m), "
            f"got {join_deadline!r}"
        )
    if on_join_timeout is not None and not join_deadline:
        # The agent refuses the key alone too: an action that can never run is a mistake.
        raise UsageError("--on-join-timeout: expected --join-deadline beside it (when to act)")
    action = "poweroff" if on_join_timeout is None else on_join_timeout.strip()
    if action not in ("poweroff", "none"):
        command = _words("--on-join-timeout", action, "poweroff, none or a command line")
    worker_words = _words("--worker-command", worker_command, "a command line")
    if worker_user and user_name_problem(worker_user):
        raise UsageError(
            f"--worker-user: expected {user_name_problem(worker_user)}, got {worker_user!r}"
        )
    if token_file is None:  # the controller admits no join without one
        raise UsageError(
            "--token-file: expected the join token's file (the controller admits no join without)"
        )
    try:
        token = token_file.read(65536).strip()  # bounded: a device or a wrong file is no token
    except UnicodeDecodeError:
        token = "\x00"  # noqa: S105 - not text: refused below like any other bad token
    if token_problem(token):
        raise UsageError(f"--token-file: expected {token_problem(token)}")
    data = UserData(
        controller_url=",".join(urls),
        template=template,
        roles=tuple(roles),
        instance_id=instance_id,
        provider=provider,
        token=token,
        ca_pem=ca_file.read() if ca_file else "",
        worker_command=worker_words,
        worker_user=worker_user,
        cloud_provider=cloud_notices,
        plain_http=plain_http,
        join_deadline=join_deadline,
        on_join_timeout=action if action in ("poweroff", "none") else command,
    )
    click.echo(render(data), nl=False)


def _words(option: str, text: str, expected: str) -> tuple[str, ...]:
    """A command line split as a shell would; a one-line error for none or an open quote."""
    import shlex

    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise UsageError(f"{option}: expected {expected}, got {text!r} ({exc})") from None
    if not words:
        raise UsageError(f"{option}: expected {expected}, got {text!r}")
    return words
