"""How `xcecli` verbs print: a table (or wide table) for people, the API's records as JSON.

Every verb prints through `out`, so what a value holds (a reason, a name) never reaches the
terminal unescaped.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import click

from xce_controller.cli.host_columns import host_table
from xce_controller.cli.observe import printable


def out(data: Any, as_json: bool, text: str | list[str]) -> None:
    # What a value holds (a reason, a name) cannot drive the terminal or forge a line: a list
    # is escaped line by line; a table's cells were escaped by text.table.
    if isinstance(text, list):
        text = "\n".join(printable(line) for line in text)
    click.echo(json.dumps(data, indent=2, sort_keys=True) if as_json else text)


OUTPUT = click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "wide", "json"]),
    default="table",
    show_default=True,
    help="wide: every column (instance, provider, CPUs, memory, joined); json: the API's records.",
)
JSON = click.option("--json", "as_json", is_flag=True, help="The API's records as JSON (-o json).")


def table_or_json(command: Callable[..., None]) -> Callable[..., None]:
    """`-o table|json` and `--json` on a verb without a wide table: the command gets as_json."""

    @functools.wraps(command)
    def run(*args: Any, output: str, as_json: bool, **kwargs: Any) -> None:
        command(*args, as_json=as_json or output == "json", **kwargs)

    choice = click.Choice(["table", "json"])
    with_json = JSON(run)
    return click.option(
        "-o",
        "--output",
        type=choice,
        default="table",
        show_default=True,
        help="json: the API's records.",
    )(with_json)


def hosts_out(data: list[dict[str, Any]], output: str, as_json: bool) -> None:
    """A list of hosts as `-o table|wide|json` (or --json) asks."""
    as_json = as_json or output == "json"
    out(data, as_json, "" if as_json else host_table(data, wide=output == "wide"))
