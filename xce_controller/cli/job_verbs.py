"""`xcecli` verbs about jobs: list, submit and cancel them."""

from __future__ import annotations

import click

from xce_controller.cli.client import Client
from xce_controller.cli.output import out, table_or_json
from xce_controller.cli.text import table as _table


@click.command()
@table_or_json
@click.pass_obj
def jobs(client: Client, as_json: bool) -> None:
    """List jobs."""
    data = client.call("GET", "/v1/jobs")
    rows = [
        [
            str(j["id"]),
            j["state"],
            j.get("assigned_host") or "-",
            str(j["slots"]),
            " ".join(j["command"])[:40],
            j["note"],
        ]
        for j in data
    ]
    out(data, as_json, _table(rows, ["JOB", "STATE", "HOST", "SLOTS", "COMMAND", "NOTE"]))


@click.command()
@click.argument("job_id", type=int)
@click.pass_obj
def cancel(client: Client, job_id: int) -> None:
    """Cancel a job (a running one is killed on its host)."""
    j = client.call("POST", f"/v1/jobs/{job_id}/cancel")
    click.echo(f"job {j['id']} {j['state']} ({j['note']})")


@click.command()
@click.argument("command", nargs=-1, required=True)
@click.option("--slots", default=1, show_default=True)
@click.option("--host", "on_host", default="", help="Run on this host only.")
@click.pass_obj
def submit(client: Client, command: tuple[str, ...], slots: int, on_host: str) -> None:
    """Submit a job: xcecli submit -- sleep 30"""
    j = client.call(
        "POST", "/v1/jobs", json={"command": list(command), "slots": slots, "host": on_host}
    )
    click.echo(f"job {j['id']} {j['state']}")
