"""`xcecli` verbs that show what the cluster is made of beside hosts and jobs: the config's
host templates and the singleton leases."""

from __future__ import annotations

from typing import Any

import click

from xce_controller.cli.client import Client
from xce_controller.cli.client_errors import ControllerRefused
from xce_controller.cli.output import out, table_or_json
from xce_controller.cli.text import table as _table
from xce_controller.cli.text import when as _when
from xce_protocol.times import parse_time


@click.command()
@table_or_json
@click.pass_obj
def templates(client: Client, as_json: bool) -> None:
    """List the config's host templates and how many live hosts use each."""
    data = client.call("GET", "/v1/templates")
    rows = [
        [
            t["name"],
            str(t["slots"]),
            t["type"] or "-",
            t["model"] or "-",
            ",".join(t["host_groups"]) or "-",
            ",".join(t["roles"]) or "-",
            str(t["hosts"]),
        ]
        for t in data
    ]
    header = ["TEMPLATE", "SLOTS", "TYPE", "MODEL", "GROUPS", "ROLES", "HOSTS"]
    out(data, as_json, _table(rows, header))


_LEASE_FIELDS = {"lease": str, "state": str, "host": str, "token": int, "last_holder": str}


def _is_lease(value: Any) -> bool:
    """A lease as GET /v1/leases shows it (what the table reads of it)."""
    if not isinstance(value, dict):
        return False
    if not all(isinstance(value.get(k), t) for k, t in _LEASE_FIELDS.items()):
        return False
    number = (int, float)
    ttl, left = value.get("ttl"), value.get("expires_in")
    at = value.get("expires_at")  # RFC 3339 (1.2) or epoch seconds (1.1)
    return (
        isinstance(ttl, number)
        and (left is None or isinstance(left, number))
        and (at is None or parse_time(at) is not None)
    )


@click.command()
@table_or_json
@click.pass_obj
def leases(client: Client, as_json: bool) -> None:
    """Leases: holder, fencing token and expiry."""
    data = client.call("GET", "/v1/leases")
    if not isinstance(data, list) or not all(_is_lease(le) for le in data):
        raise ControllerRefused(f"{client.url} answered something that is not a list of leases")
    rows = [
        [
            le["lease"],
            le["state"],
            le["host"] or "-",
            str(le["token"]),
            f"{le['ttl']:g}s",
            f"{_when(le['expires_at'])} (in {le['expires_in']:.1f}s)" if le["expires_in"] else "-",
            le["last_holder"] or "-",
        ]
        for le in data
    ]
    header = ["LEASE", "STATE", "HOLDER", "TOKEN", "TTL", "EXPIRES", "LAST HOLDER"]
    out(data, as_json, _table(rows, header))
