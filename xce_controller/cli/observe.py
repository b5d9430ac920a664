"""`xcecli events` and `xcecli why`: what happened, as it is committed and as a story.

Both read `/v1/events` (the admin token or the read-only token will do). `events --follow`
keeps the stream open and, if the controller goes away, reconnects from the last event it
printed, so nothing is skipped or printed twice. A read without `--follow` whose stream
broke off before its end (its replica lost its database mid-stream, or was stopped) reads
on from the last event it got on the next URL, the same way; once every URL broke off, it
says where in one line (exit 3).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import click
import requests

from xce_controller.cli.client_errors import ControllerUnreachable, why_unreachable
from xce_controller.core.story import story
from xce_protocol.times import parse_time, times_to_epoch

RECONNECT_MAX = 10.0
# C0 and C1 controls and DEL: a reason or host name holding them must not move the cursor,
# retitle the terminal or forge a line of its own.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")


def printable(line: str) -> str:
    """`line` with every control character shown as an escape (ESC as \\x1b)."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", line)


class ApiClient(Protocol):
    url: str
    urls: list[str]
    session: requests.Session

    def call(self, method: str, path: str, **kwargs: Any) -> Any: ...
    def send(self, method: str, path: str, **kwargs: Any) -> requests.Response: ...
    def unreachable(self, exc: requests.RequestException) -> ControllerUnreachable: ...
    def move_on(self) -> None: ...


class StreamBroke(Exception):
    """The stream from `url` broke off after its answer began (`cause`): unlike a request no
    URL answered, the events it gave are good, and the read can go on from the last one."""

    def __init__(self, url: str, cause: requests.RequestException) -> None:
        super().__init__(url, cause)
        self.url, self.cause = url, cause

    def line(self, last: int) -> str:
        """What is said once no URL is left to read on from."""
        return (
            f"the events stream from {self.url} broke off after event #{last} "
            f"({why_unreachable(self.cause)})"
        )


def _stream(client: ApiClient, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Events from one connection; raises requests errors when no URL answered, StreamBroke
    when the answer broke off, ends when the server ends it."""
    with client.send("GET", "/v1/events", params=params, stream=True, timeout=(10, 60)) as response:
        if response.status_code >= 400:
            client.call("GET", "/v1/events", params={**params, "follow": "false"})
            raise click.ClickException(f"{response.status_code} from /v1/events")
        try:
            for line in response.iter_lines():
                if line:  # blank lines are the server's keepalive
                    yield json.loads(line)
        except requests.RequestException as exc:
            raise StreamBroke(client.url, exc) from exc


def read_on(client: ApiClient, params: dict[str, Any], hint: str = "") -> Iterator[dict[str, Any]]:
    """Every event a read without follow gives: a stream that broke off is read on from the
    last event got, on the next URL (each break moves one URL on, as many as there are), as
    `--follow` reconnects. Past that, ControllerUnreachable saying where it broke, `hint`
    (with `{last}`, the last event got) after it."""
    last, breaks = int(params.get("since", 0)), 0
    while True:
        try:
            for event in _stream(client, {**params, "since": last}):
                last = int(event["seq"])
                yield event
            return
        except StreamBroke as broke:
            breaks += 1
            if breaks >= len(client.urls):
                raise ControllerUnreachable(broke.line(last) + hint.format(last=last)) from None
            client.move_on()


def _line(e: dict[str, Any]) -> str:
    what = e["kind"] + (f" {e['state']}" if e.get("state") else "")
    what += f" job {e['job']}" if e.get("job") is not None else ""
    code = e.get("code") or e["data"].get("code")
    why = " ".join(x for x in (e.get("why") or "", f"[{code}]" if code else "") if x)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(parse_time(e["at"]) or 0))
    line = f"{stamp}  #{e['seq']:<6} {e['host'] or '-':<20} {what:<22} by {e['by']}"
    return f"{line}: {why}" if why else line


@click.command()
@click.option("--follow", "-f", is_flag=True, help="Keep printing events as they happen.")
@click.option("--host", default="", help="Only events about this host (name or instance).")
@click.option("--since", default=0, type=click.IntRange(min=0), help="After this event number.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def events(client: ApiClient, follow: bool, host: str, since: int, as_json: bool) -> None:
    """Print committed facts, oldest first; with --follow, each new one as it is committed."""

    def show(e: dict[str, Any]) -> None:
        click.echo(json.dumps(e, sort_keys=True) if as_json else printable(_line(e)))

    if follow:
        _follow(client, since, host, show)
        return
    params = {"since": since, "host": host, "follow": "false"}
    try:
        for e in read_on(client, params, "; `xcecli events --since {last}` reads on from there"):
            show(e)
    except requests.RequestException as exc:
        raise client.unreachable(exc) from None


def _follow(
    client: ApiClient, since: int, host: str, show: Callable[[dict[str, Any]], None]
) -> None:
    """Events as they are committed, for good: a lost stream is reconnected from the last
    event shown (the first URL that answers, a replica that lost its database answering
    503), so nothing is skipped or shown twice."""
    last, delay = since, 1.0
    while True:
        params = {"since": last, "host": host, "follow": "true"}
        try:
            for e in _stream(client, params):
                show(e)
                last, delay = e["seq"], 1.0
        except (requests.RequestException, StreamBroke) as exc:
            cause = exc.cause if isinstance(exc, StreamBroke) else exc
            click.echo(f"xcecli: stream lost ({why_unreachable(cause)}); reconnecting", err=True)
            time.sleep(delay)  # a backoff between reconnects, not a wait for a condition
            delay = min(delay * 2, RECONNECT_MAX)
            continue
        time.sleep(delay)  # the server ended the stream (restart): reconnect
        delay = min(delay * 2, RECONNECT_MAX)


@click.command()
@click.argument("name")
@click.pass_obj
def why(client: ApiClient, name: str) -> None:
    """Why a host is where it is: its story from its facts, with durations."""
    # The story counts durations in seconds: times of either form (1.1, 1.2) become those.
    host = times_to_epoch(client.call("GET", f"/v1/hosts/{name}"))
    try:
        params = {"host": host["instance_id"] or host["key"]}
        history = [times_to_epoch(e) for e in read_on(client, params)]
    except requests.RequestException as exc:
        raise client.unreachable(exc) from None
    # This record's own facts, and a lease another host took over from it (its loss).
    mine = [e for e in history if host["key"] in (e["key"], e["data"].get("previous_key"))]
    click.echo("\n".join(printable(line) for line in story(host, mine, time.time())))
