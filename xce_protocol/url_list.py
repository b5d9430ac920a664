"""The `controller.url` key of a config: one URL, or a list of the controller's replicas.

The agent's config and the provisioner's read it the same way: every entry an http:// or
https:// URL of `URL`'s shape that a client can connect to (`usable`), 1 to MAX_URLS of
them, none listed twice; the list is tried in order (xce_protocol/replicas.py). A config may
add a rule of its own for each entry (the agent's: http:// only to loopback, or with
`plain_http: true`).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable

from xce_protocol.validation import Checker, describe
from xce_protocol.yamlsource import LineDict, LineList

MAX_URLS = 16
# No userinfo and no backslash in the authority: `http://ctl.example\@127.0.0.1/` reads as
# loopback to urllib.parse but requests sends it (and the token) to ctl.example. No comma:
# no host name has one, and `http://a,http://b` is a list written as one string.
URL = re.compile(r"^https?://[^\s/\\@?#,]+(/\S*)?$")
EXPECTED = "an http:// or https:// URL"
KEY = "controller.url"


def usable(url: str) -> bool:
    """A URL of URL's shape that a client can also connect to: a host, and a port (if
    given) from 1 to 65535; `http://:80`, `http://h:99999` and `http://[::1` are not."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    return bool(parts.hostname) and (port is None or 1 <= port <= 65535)


def parse(
    node: LineDict, c: Checker, rule: Callable[[str, str, int], bool] | None = None
) -> tuple[str, ...] | None:
    """The URLs of `node`'s `url` key (trailing / removed), or None after reporting every
    problem. `rule(url, path, line)`, if given, is the config's own check of an entry of the
    right shape: False once it has reported why not."""
    if "url" not in node:
        c.report(KEY, f"{EXPECTED} or a list of them", "nothing", node.line)
        return None
    value = node["url"]
    line = c.line_of(node, "url")
    if not isinstance(value, LineList):
        one = _entry(value, KEY, line, c, rule)
        return None if one is None else (one,)
    if not 1 <= len(value) <= MAX_URLS:
        c.report(KEY, f"a list of 1 to {MAX_URLS} URLs", f"{len(value)} entries", line)
        return None
    urls = [_entry(v, f"{KEY}[{i}]", value.item_lines[i], c, rule) for i, v in enumerate(value)]
    found = tuple(u for u in urls if u is not None)
    if len(found) != len(urls):
        return None
    for index, url in enumerate(found):
        if url in found[:index]:
            c.report(f"{KEY}[{index}]", "a URL not listed before", describe(url), line)
            return None
    return found


def _entry(
    value: object, path: str, line: int, c: Checker, rule: Callable[[str, str, int], bool] | None
) -> str | None:
    if not isinstance(value, str) or not URL.fullmatch(value) or not usable(value):
        got = describe(value)
        if isinstance(value, str) and value.count("://") > 1:
            got += " (several URLs are written as a YAML list)"
        c.report(path, EXPECTED, got, line)
        return None
    if rule is not None and not rule(value, path, line):
        return None
    return value.rstrip("/")
