"""`xcecli`: the admin CLI of the reference controller (the name the brief uses).

Exit codes: 0 ok; 1 the controller refused (its message printed as one line); 2 usage;
3 the controller could not be reached. The client raises typed errors; the group
(xce_protocol.exits) turns each into its line and exit code.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.parse
from typing import Any

import click
import requests
from urllib3.exceptions import NewConnectionError

from xce_controller.cli.client_errors import ControllerRefused, ControllerUnreachable
from xce_controller.cli.observe import events, printable, why
from xce_controller.core.model import AdminAction, HostState
from xce_protocol import names, replicas
from xce_protocol.errors import UsageError
from xce_protocol.exits import ErrorExits


def controller_urls(text: str) -> list[str]:
    """--url: one URL or a comma-separated list of the controller's replicas."""
    urls = [part.strip().rstrip("/") for part in text.split(",")]
    for url in urls:
        try:
            host = urllib.parse.urlsplit(url).hostname
        except ValueError:  # an unclosed [ of an IPv6 address
            host = None
        if not url.startswith(("http://", "https://")) or not host:
            shown = printable(url)[:200]
            raise UsageError(f"--url: expected http(s) URLs separated by commas, got {shown!r}")
    return urls


class Client:
    def __init__(self, url: str, token: str) -> None:
        self.urls = controller_urls(url)
        self.current = 0
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    @property
    def url(self) -> str:
        return self.urls[self.current]

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.send(method, path, timeout=30, **kwargs)
        except requests.RequestException as exc:
            where = ", ".join(self.urls)
            raise ControllerUnreachable(f"cannot reach {where}: {type(exc).__name__}") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            message = body.get("message") if isinstance(body, dict) else response.text[:200]
            line = printable(str(message))[:300]  # one line: control characters escaped
            raise ControllerRefused(f"{response.status_code}: {line}")
        return body

    def send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """The answer of the first URL that can serve, trying each once from the current
        one (replicas.moves_on); the last URL's answer or failure when none can."""
        order = replicas.attempts(self.current, len(self.urls))
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


def _when(ts: float | None, now: float | None = None) -> str:
    """Local time of day; with the date when it is more than a day away from now."""
    if not ts:
        return "-"
    far = abs((time.time() if now is None else now) - ts) > 86400
    return time.strftime("%Y-%m-%d %H:%M:%S" if far else "%H:%M:%S", time.localtime(ts))


def _code(record: dict[str, Any]) -> str:
    return f" [{record['code']}]" if record.get("code") else ""


def _table(rows: list[list[str]], header: list[str]) -> str:
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


@click.group(cls=ErrorExits, name="xcecli")
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
@click.pass_context
def main(ctx: click.Context, url: str, token: str, token_file: str | None) -> None:
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
    ctx.obj = Client(url, token)


def _out(data: Any, as_json: bool, text: str | list[str]) -> None:
    # What a value holds (a reason, a name) cannot drive the terminal or forge a line: a list
    # is escaped line by line; a table's cells were escaped by _table.
    if isinstance(text, list):
        text = "\n".join(printable(line) for line in text)
    click.echo(json.dumps(data, indent=2, sort_keys=True) if as_json else text)


def _notice(h: dict[str, Any]) -> str:
    """`preemption 08:22:00` (the time the platform acts), or '-'."""
    n = h.get("notice")
    if not n:
        return "-"
    return f"{n['kind']} {_when(n['deadline'])}" if n["deadline"] else n["kind"]


def _host_rows(hosts: list[dict[str, Any]]) -> str:
    rows = [
        [
            h["name"] or h["expected_name"] or h["expected_address"] or "-",
            h["state"],
            h["instance_id"] or "-",
            h["template"],
            "yes" if h["provisioned"] else "no",
            str(h["jobs_running"]),
            _when(h["joined_at"]),
            _when(h["deadline"]) if h["state"] in (HostState.EXPECTED, HostState.OVERDUE) else "-",
            _notice(h),
            h["reason"] + _code(h),
        ]
        for h in hosts
    ]
    header = [
        "HOST",
        "STATE",
        "INSTANCE",
        "TEMPLATE",
        "PROV",
        "JOBS",
        "JOINED",
        "DEADLINE",
        "NOTICE",
        "REASON",
    ]
    return _table(rows, header)


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
            _notice(h),
            last_report(h),
            h["reason"] + _code(h),
        ]
        for h in hosts
    ]
    return _table(rows, ["INSTANCE", "HOST", "STATE", "NOTICE", "LAST REPORT", "REASON"])


@main.command()
@click.option("--all", "show_all", is_flag=True, help="Include decommissioned and returned.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def hosts(client: Client, show_all: bool, as_json: bool) -> None:
    """List hosts."""
    data = client.call("GET", "/v1/hosts", params={"all": str(show_all).lower()})
    _out(data, as_json, _host_rows(data))


@main.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def host(client: Client, name: str, as_json: bool) -> None:
    """Show one host with its provisioning details and state history."""
    h = client.call("GET", f"/v1/hosts/{name}")
    lines = [
        f"{k:<17} {h[k] if h[k] not in (None, '') else '-'}"
        for k in (
            "name",
            "state",
            "reason",
            "instance_id",
            "template",
            "provider",
            "provisioned",
            "expected_name",
            "expected_address",
            "jobs_running",
            "incarnation",
            "refusals",
            "last_refusal",
        )
    ]
    lines += [
        f"{k:<17} {_when(h[k])}" for k in ("expected_at", "deadline", "joined_at", "last_seen")
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
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def expected(client: Client, as_json: bool) -> None:
    """Expected instances, overdue ones included."""
    data = client.call("GET", "/v1/expected")
    _out(data, as_json, _host_rows(data))


@main.command()
@click.argument("instance_id")
@click.option("--template", required=True)
@click.option("--name", "expected_name", default="", help="Expected host name.")
@click.option("--address", "expected_address", default="", help="Expected address.")
@click.option("--deadline", "deadline_in", type=float, help="Seconds to join (default: config).")
@click.option("--provider", default="")
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


@main.command()
@click.argument("name")
@click.pass_obj
def close(client: Client, name: str) -> None:
    """Close a host to new work."""
    _control(client, name, AdminAction.CLOSE, {})


@main.command()
@click.argument("name")
@click.option("--drain-timeout", type=float, help="Seconds before the policy applies.")
@click.option("--policy", type=click.Choice(["requeue", "kill", "wait"]))
@click.option("--reason", default="")
@click.pass_obj
def decommission(
    client: Client, name: str, drain_timeout: float | None, policy: str | None, reason: str
) -> None:
    """Drain a host, then decommission it (its rejoin is refused)."""
    body: dict[str, Any] = {"reason": reason}
    if drain_timeout is not None:
        body["drain_timeout"] = drain_timeout
    if policy:
        body["policy"] = policy
    _control(client, name, AdminAction.DECOMMISSION, body)


@main.command("to-return")
@click.option("--ack", "ack_id", help="Acknowledge that this instance was returned.")
@click.option("--json", "as_json", is_flag=True)
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
@click.option("--json", "as_json", is_flag=True)
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
@click.option("--json", "as_json", is_flag=True)
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
    at = value.get("expires_at")
    return (
        isinstance(ttl, number)
        and (left is None or isinstance(left, number))
        and (at is None or isinstance(at, number))
    )


@main.command()
@click.option("--json", "as_json", is_flag=True)
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
