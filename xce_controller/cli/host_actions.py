"""`xcecli` verbs that act on hosts: record an expected instance, open, close and
decommission a host (the last two can follow it until its jobs are gone)."""

from __future__ import annotations

import time
from typing import Any

import click

from xce_controller.cli.client import Client
from xce_controller.cli.observe import printable
from xce_controller.cli.text import code as _code
from xce_controller.cli.text import when as _when
from xce_controller.cli.waiting import WaitInterrupted, close_progress, drain_progress, follow
from xce_controller.core.model import AdminAction
from xce_protocol.durations import Duration


@click.command()
@click.argument("instance_id")
@click.option("--template", required=True)
@click.option("--name", "expected_name", default="", help="Expected host name.")
@click.option("--address", "expected_address", default="", help="Expected address.")
@click.option(
    "--deadline",
    "deadline_in",
    type=Duration(minimum=1, maximum=10 * 365 * 86400),
    help="How long it may take to join (like 15m; default: config).",
)
@click.option("--provider", default="", help="Whose instance it is (aws, gce, ...), shown.")
@click.option("--join-token", default="", help="Per-instance join token.")
@click.option(
    "--mint-join-token",
    is_flag=True,
    help="Have the controller mint a single-use join token for the instance (printed once).",
)
@click.pass_obj
def expect(client: Client, /, instance_id: str, **fields: Any) -> None:
    """Record an expected instance (the provisioner token or the admin token)."""
    body = {k: v for k, v in fields.items() if v not in (None, "", False)}
    h = client.call("POST", "/v1/expected", json={"instance_id": instance_id, **body})
    click.echo(f"expected {h['instance_id']} ({h['template']}) until {_when(h['deadline'])}")
    if h.get("join_token"):
        click.echo(f"join token for {h['instance_id']} (shown once): {h['join_token']}")


def _control(client: Client, name: str, action: AdminAction, body: dict[str, Any]) -> None:
    h = client.call("POST", f"/v1/hosts/{name}/{action.value}", json=body)
    shown = h["name"] or h["expected_name"] or h["instance_id"] or name
    click.echo(f"{shown}: {h['state']} ({h['reason']}){_code(h)}")


@click.command("open")
@click.argument("name")
@click.pass_obj
def open_(client: Client, name: str) -> None:
    """Open a host to new work."""
    _control(client, name, AdminAction.OPEN, {})


_WAIT = click.option(
    "--wait",
    is_flag=True,
    help="Follow the host until its jobs are gone; exit 0 if it got there, 1 if not "
    "(130 on Ctrl-C: what was asked still stands).",
)
_REASON = click.option("--reason", default="", help="Why (kept in the host's history).")


def _wait(client: Client, name: str, progress: Any, asked: str) -> None:
    try:
        follow(
            lambda: client.call("GET", f"/v1/hosts/{name}"),
            progress,
            lambda line: click.echo(printable(line)),
            time.time,
            time.sleep,  # the poll interval, not a synchronisation
        )
    except KeyboardInterrupt:
        raise WaitInterrupted(f"{name}: stopped waiting; the {asked} stands") from None


@click.command()
@click.argument("name")
@_REASON
@_WAIT
@click.pass_obj
def close(client: Client, name: str, reason: str, wait: bool) -> None:
    """Close a host to new work (--wait: until its running jobs ended)."""
    _control(client, name, AdminAction.CLOSE, {"reason": reason} if reason else {})
    if wait:
        _wait(client, name, close_progress, "close")


@click.command()
@click.argument("name")
@click.option(
    "--drain-timeout",
    type=Duration(),
    help="How long jobs may run before the policy applies (like 10m; default: config).",
)
@click.option(
    "--policy",
    type=click.Choice(["requeue", "kill", "wait"]),
    help="At the drain timeout: requeue or kill the jobs left, or wait (default: config).",
)
@_REASON
@_WAIT
@click.pass_obj
def decommission(
    client: Client,
    name: str,
    drain_timeout: float | None,
    policy: str | None,
    reason: str,
    wait: bool,
) -> None:
    """Drain a host, then decommission it (its rejoin is refused); --wait shows the drain."""
    body: dict[str, Any] = {"reason": reason}
    if drain_timeout is not None:
        body["drain_timeout"] = drain_timeout
    if policy:
        body["policy"] = policy
    _control(client, name, AdminAction.DECOMMISSION, body)
    if wait:
        _wait(client, name, drain_progress, "decommission")
