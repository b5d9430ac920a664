"""`xcecli`: the admin CLI of the reference controller (the name the brief uses).

Exit codes: 0 ok; 1 the controller refused (its message printed as one line); 2 usage;
3 the controller could not be reached. The client raises typed errors; the group
(xce_protocol.exits) turns each into its line and exit code.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import click
import requests
from urllib3.exceptions import NewConnectionError

from xce_controller import __version__
from xce_controller.cli.client_errors import ControllerRefused, unreachable
from xce_controller.cli.client_tls import ClientTls, client_tls
from xce_controller.cli.host_columns import host_table, notice
from xce_controller.cli.observe import events, printable, why
from xce_controller.cli.text import code as _code
from xce_controller.cli.text import size
from xce_controller.cli.text import table as _table
from xce_controller.cli.text import when as _when
from xce_controller.cli.waiting import WaitInterrupted, close_progress, drain_progress, follow
from xce_controller.core.model import AdminAction
from xce_protocol import names, replicas
from xce_protocol.durations import Duration
from xce_protocol.errors import UsageError
from xce_protocol.exits import ErrorExits
from xce_protocol.times import parse_time


def controller_urls(text: str) -> list[str]:
    """--url: one URL or a comma-separated list of the controller's replicas."""
    urls = [part.strip().rstrip("/") for part in text.split(",")]
    for url in urls:
        try:
            parts = urllib.parse.urlsplit(url)
            host = parts.hostname
            parts.port  # noqa: B018  # raises for a port out of range or not a number
        except ValueError:  # an unclosed [ of an IPv6 address, a bad port
            host = None
        if not url.startswith(("http://", "https://")) or not host:
            shown = printable(url)[:200]
            raise UsageError(f"--url: expected http(s) URLs separated by commas, got {shown!r}")
    return urls


class Client:
    def __init__(
        self, url: str, token: str, timeout: float = 30.0, tls: ClientTls | None = None
    ) -> None:
        self.urls = controller_urls(url)
        self.current = 0
        self.timeout = timeout
        self.tls = tls or ClientTls()
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    @property
    def url(self) -> str:
        return self.urls[self.current]

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.send(method, path, timeout=self.timeout, **kwargs)
        except requests.RequestException as exc:
            raise unreachable(", ".join(self.urls), exc, self.tls.cert is not None) from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            message = body.get("message") if isinstance(body, dict) else None
            if not message:  # not the controller's problem document: a proxy, another service
                said = printable(response.text)[:200] or "empty"
                raise ControllerRefused(
                    f"{response.status_code} {printable(response.reason or '')[:80]} from "
                    f"{self.url}: not a controller's answer: {said}"
                )
            line = printable(str(message))[:300]  # one line: control characters escaped
            if response.status_code == 401 and "Authorization" not in self.session.headers:
                line += " (no token given: --token-file, $XCE_ADMIN_TOKEN_FILE or --token)"
            raise ControllerRefused(f"{response.status_code}: {line}")
        return body

    def send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """The answer of the first URL that can serve, trying each once from the current
        one (replicas.moves_on); the last URL's answer or failure when none can."""
        order = replicas.attempts(self.current, len(self.urls))
        kwargs.update(self.tls.request_options())
        for index in order:
            last = index == order[-1]
            try:
                response = self.session.request(method, self.urls[index] + path, **kwargs)
            except requests.RequestException as exc:
                # A change whose connection broke once sent may have been made: not sent again.
                if last or (method != "GET" and not _unsent(exc)):
                    raise
                continue
            if last or not replicas.moves_on(response.status_code):
                self.current = index
                return response
            response.close()
        raise AssertionError("unreachable: the last URL answers or raises")


def _unsent(exc: requests.RequestException) -> bool:
    """The request never reached a server: no connection could be made."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(exc, requests.ConnectionError) and isinstance(reason, NewConnectionError)


@click.group(cls=ErrorExits, name="xcecli")
@click.version_option(__version__, prog_name="xcecli")
@click.option(
    "--url",
    envvar="XCE_CONTROLLER_URL",
    default="http://127.0.0.1:7870",
    show_default=True,
    help="Controller URL, or its replicas' URLs separated by commas ($XCE_CONTROLLER_URL).",
)
@click.option(
    "--token", envvar="XCE_ADMIN_TOKEN", default="", help="Admin token ($XCE_ADMIN_TOKEN)."
)
@click.option(
    "--token-file",
    envvar="XCE_ADMIN_TOKEN_FILE",
    type=click.Path(dir_okay=False),
    help="File holding the admin token ($XCE_ADMIN_TOKEN_FILE), such as the DB.admin-token "
    "file `xce-controller serve` writes when the config sets none.",
)
@click.option(
    "--timeout",
    envvar="XCE_CONTROLLER_TIMEOUT",
    type=Duration(minimum=0.1, maximum=3600),
    default="30s",
    show_default=True,
    help="How long to wait for the controller's answer, like 5s ($XCE_CONTROLLER_TIMEOUT).",
)
@click.option(
    "--ca-file",
    envvar="XCE_CONTROLLER_CA_FILE",
    type=click.Path(dir_okay=False),
    help="PEM CA bundle that signed the controller's certificate ($XCE_CONTROLLER_CA_FILE); "
    "default: the system's.",
)
@click.option(
    "--client-cert-file",
    envvar="XCE_CLIENT_CERT_FILE",
    type=click.Path(dir_okay=False),
    help="PEM certificate shown to a controller that requires one ($XCE_CLIENT_CERT_FILE).",
)
@click.option(
    "--client-key-file",
    envvar="XCE_CLIENT_KEY_FILE",
    type=click.Path(dir_okay=False),
    help="Its unencrypted PEM key ($XCE_CLIENT_KEY_FILE).",
)
@click.pass_context
def main(
    ctx: click.Context,
    url: str,
    token: str,
    token_file: str | None,
    timeout: float,
    ca_file: str | None,
    client_cert_file: str | None,
    client_key_file: str | None,
) -> None:
    """Admin CLI of the XCE reference controller."""
    if token_file and not token:
        try:
            with open(token_file, encoding="utf-8") as handle:
                token = handle.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise UsageError(f"--token-file {token_file}: {why}") from None
    if token and not names.is_bearer_token(token):  # no header carries it (never shown)
        raise UsageError("--token: expected printable ASCII characters without spaces")
    ctx.obj = Client(url, token, timeout, client_tls(ca_file, client_cert_file, client_key_file))


def _out(data: Any, as_json: bool, text: str | list[str]) -> None:
    # What a value holds (a reason, a name) cannot drive the terminal or forge a line: a list
    # is escaped line by line; a table's cells were escaped by _table.
    if isinstance(text, list):
        text = "\n".join(printable(line) for line in text)
    click.echo(json.dumps(data, indent=2, sort_keys=True) if as_json else text)


def _host_rows(hosts: list[dict[str, Any]], wide: bool = False) -> str:
    return host_table(hosts, wide)


_OUTPUT = click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "wide", "json"]),
    default="table",
    show_default=True,
    help="wide: every column (instance, provider, CPUs, memory, joined); json: the API's records.",
)
_JSON = click.option("--json", "as_json", is_flag=True, help="The API's records as JSON (-o json).")


def _table_or_json(command: Callable[..., None]) -> Callable[..., None]:
    """`-o table|json` and `--json` on a verb without a wide table: the command gets as_json."""

    @functools.wraps(command)
    def run(*args: Any, output: str, as_json: bool, **kwargs: Any) -> None:
        command(*args, as_json=as_json or output == "json", **kwargs)

    choice = click.Choice(["table", "json"])
    with_json = _JSON(run)
    return click.option(
        "-o",
        "--output",
        type=choice,
        default="table",
        show_default=True,
        help="json: the API's records.",
    )(with_json)


def _hosts_out(data: list[dict[str, Any]], output: str, as_json: bool) -> None:
    as_json = as_json or output == "json"
    _out(data, as_json, "" if as_json else _host_rows(data, wide=output == "wide"))


def last_report(h: dict[str, Any]) -> str:
    """The agent's last report, short: its state and each component's, and when."""
    report = h.get("report")
    if not report:
        return "-"
    parts = [f"{c.get('name', '?')} {c.get('state', '?')}" for c in report.get("components", [])]
    shown = ", ".join([str(report.get("agent_state", "-")), *parts])
    return f"{shown[:60]} at {_when(report.get('at'))}"


def _return_rows(hosts: list[dict[str, Any]]) -> str:
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


@main.command()
@click.option("--all", "show_all", is_flag=True, help="Include decommissioned and returned.")
@_OUTPUT
@_JSON
@click.pass_obj
def hosts(client: Client, show_all: bool, output: str, as_json: bool) -> None:
    """List hosts: state, slots, jobs, agent version, last seen (-o wide: more)."""
    data = client.call("GET", "/v1/hosts", params={"all": str(show_all).lower()})
    _hosts_out(data, output, as_json)


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


@main.command()
@click.argument("name")
@_table_or_json
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
    _out(h, as_json, lines)


@main.command()
@_OUTPUT
@_JSON
@click.pass_obj
def expected(client: Client, output: str, as_json: bool) -> None:
    """Expected instances, overdue ones included."""
    data = client.call("GET", "/v1/expected")
    _hosts_out(data, output, as_json)


@main.command()
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


@main.command("open")
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


@main.command()
@click.argument("name")
@_REASON
@_WAIT
@click.pass_obj
def close(client: Client, name: str, reason: str, wait: bool) -> None:
    """Close a host to new work (--wait: until its running jobs ended)."""
    _control(client, name, AdminAction.CLOSE, {"reason": reason} if reason else {})
    if wait:
        _wait(client, name, close_progress, "close")


@main.command()
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


@main.command("to-return")
@click.option("--ack", "ack_id", help="Acknowledge that this instance was returned.")
@_table_or_json
@click.pass_obj
def to_return(client: Client, ack_id: str | None, as_json: bool) -> None:
    """Instances to give back to the provider (overdue, decommissioned, lost)."""
    if ack_id:
        h = client.call("POST", f"/v1/to-return/{ack_id}/ack")
        click.echo(f"{h['instance_id']}: {h['state']}")
        return
    data = client.call("GET", "/v1/to-return")
    _out(data, as_json, _return_rows(data))


@main.command()
@_table_or_json
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
    _out(data, as_json, _table(rows, ["JOB", "STATE", "HOST", "SLOTS", "COMMAND", "NOTE"]))


@main.command()
@click.argument("job_id", type=int)
@click.pass_obj
def cancel(client: Client, job_id: int) -> None:
    """Cancel a job (a running one is killed on its host)."""
    j = client.call("POST", f"/v1/jobs/{job_id}/cancel")
    click.echo(f"job {j['id']} {j['state']} ({j['note']})")


@main.command()
@_table_or_json
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
    _out(data, as_json, _table(rows, header))


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


@main.command()
@_table_or_json
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
    _out(data, as_json, _table(rows, header))


@main.command()
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


main.add_command(events)
main.add_command(why)

if __name__ == "__main__":
    main(prog_name=os.path.basename(sys.argv[0]))
