"""`xce-agent render-user-data`: its options checked as the agent would check the config they
become (a URL it could never join, a token it could never send), then the cloud-init
user-data printed (operator/userdata.py renders it)."""

from __future__ import annotations

from typing import Any

import click

from xce_agent.errors import UsageError
from xce_protocol.roles import KNOWN_ROLES


@click.command("render-user-data")
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


def _check_controller_url(url: str, plain_http: bool) -> None:
    from xce_agent.config.agent import loopback_url
    from xce_protocol.url_list import URL, usable

    # The agent's own rule (xce_protocol/url_list.py): else it could never join.
    if not URL.fullmatch(url) or not usable(url):
        raise UsageError(f"--controller-url: expected an http:// or https:// URL, got {url!r}")
    if url.startswith("http://") and not plain_http and not loopback_url(url):
        raise UsageError(
            f"--controller-url: expected an https:// URL (http:// only to loopback, "
            f"or with --plain-http), got {url!r}"
        )


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
