"""`xcecli` verbs that show hosts: the list, one host in full, the expected instances, and
the instances to give back to the provider (with their acknowledgement)."""

from __future__ import annotations

from typing import Any

import click

from xce_controller.cli.client import Client
from xce_controller.cli.host_columns import notice
from xce_controller.cli.output import JSON, OUTPUT, hosts_out, out, table_or_json
from xce_controller.cli.text import code as _code
from xce_controller.cli.text import size
from xce_controller.cli.text import table as _table
from xce_controller.cli.text import when as _when


def last_report(h: dict[str, Any]) -> str:
    """The agent's last report, short: its state and each component's, and when."""
    report = h.get("report")
    if not report:
        return "-"
    parts = [f"{c.get('name', '?')} {c.get('state', '?')}" for c in report.get("components", [])]
    shown = ", ".join([str(report.get("agent_state", "-")), *parts])
    return f"{shown[:60]} at {_when(report.get('at'))}"


def return_rows(hosts: list[dict[str, Any]]) -> str:
    """The to-return list: each instance with the agent's last report (worker stopped)."""
    rows = [
        [
            h["instance_id"] or "-",
            h["name"] or h["expected_name"] or h["expected_address"] or "-",
            h["state"],
            notice(h),
            last_report(h),
            h["reason"] + _code(h),
        ]
        for h in hosts
    ]
    return _table(rows, ["INSTANCE", "HOST", "STATE", "NOTICE", "LAST REPORT", "REASON"])


@click.command()
@click.option("--all", "show_all", is_flag=True, help="Include decommissioned and returned.")
@OUTPUT
@JSON
@click.pass_obj
def hosts(client: Client, show_all: bool, output: str, as_json: bool) -> None:
    """List hosts: state, slots, jobs, agent version, last seen (-o wide: more)."""
    data = client.call("GET", "/v1/hosts", params={"all": str(show_all).lower()})
    hosts_out(data, output, as_json)


_HOST_FIELDS = (
    "name",
    "state",
    "reason",
    "instance_id",
    "template",
    "slots",
    "provider",
    "provisioned",
    "expected_name",
    "expected_address",
    "agent_version",
    "cpus",
    "memory",
    "jobs_running",
    "incarnation",
    "refusals",
    "last_refusal",
)


def _field(h: dict[str, Any], key: str) -> str:
    """One line of `host`: in words where the API has a flag, '-' where it has nothing."""
    if key == "provisioned":
        if h.get("provisioned"):
            return "yes (recorded by the provisioner before it joined)"
        return "no (joined without being expected)"
    if key in ("cpus", "memory"):
        value = (h.get("resources") or {}).get("cpus" if key == "cpus" else "memory_bytes")
        return "-" if value is None else (str(value) if key == "cpus" else size(value))
    value = h.get(key)
    return "-" if value in (None, "") else str(value)


@click.command()
@click.argument("name")
@table_or_json
@click.pass_obj
def host(client: Client, name: str, as_json: bool) -> None:
    """Show one host with its provisioning details and state history."""
    h = client.call("GET", f"/v1/hosts/{name}")
    lines = [f"{k:<17} {_field(h, k)}" for k in _HOST_FIELDS]
    lines += [
        f"{k:<17} {_when(h.get(k))}" for k in ("expected_at", "deadline", "joined_at", "last_seen")
    ]
    if h["drain"]:
        d = h["drain"]
        lines.append(
            f"{'drain':<17} policy {d['policy']}, timeout {d['timeout']}, "
            f"deadline {_when(d['deadline'])}"
        )
    n = h.get("notice")
    if n:
        acts = f", jobs requeued at {_when(n['act_at'])}" if n["act_at"] else ""
        done = " (done)" if n["acted"] else ""
        lapse = f", lapses at {_when(n['reopen_at'])}" if n["reopen_at"] else ""
        lines.append(
            f"{'notice':<17} {n['kind']} from {n['provider'] or '-'} ({n['event_id']}), "
            f"platform acts at {_when(n['deadline'])}{acts}{done}{lapse}"
        )
    report = h.get("report")
    if report:
        lines.append(
            f"{'agent report':<17} {report.get('agent_state', '-')} at {_when(report.get('at'))}"
        )
        lines += [
            f"  {c['name']:<15} {c['state']:<9} pid {c.get('pid') or '-'}, "
            f"restarts {c.get('restarts', 0)}"
            for c in report.get("components", [])
        ]
    lines.append("history:")
    lines += [
        f"  {_when(c['at'])}  {c['state']:<15} by {c['by']}: {c['why']}{_code(c)}"
        for c in h["history"]
    ]
    out(h, as_json, lines)


@click.command()
@OUTPUT
@JSON
@click.pass_obj
def expected(client: Client, output: str, as_json: bool) -> None:
    """Expected instances, overdue ones included."""
    data = client.call("GET", "/v1/expected")
    hosts_out(data, output, as_json)


@click.command("to-return")
@click.option("--ack", "ack_id", help="Acknowledge that this instance was returned.")
@table_or_json
@click.pass_obj
def to_return(client: Client, ack_id: str | None, as_json: bool) -> None:
    """Instances to give back to the provider (overdue, decommissioned, lost)."""
    if ack_id:
        h = client.call("POST", f"/v1/to-return/{ack_id}/ack")
        click.echo(f"{h['instance_id']}: {h['state']}")
        return
    data = client.call("GET", "/v1/to-return")
    out(data, as_json, return_rows(data))
