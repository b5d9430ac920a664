"""The `controller.url` key of the agent's config: one URL, or a list of the controller's replicas.

Every entry obeys the rules of a single URL: http:// or https://, nothing in the authority that
parsers read differently, and http:// only to loopback or with `plain_http: true` (join tokens
and host credentials travel in the clear over http). The list is the cluster's controller, in
the order the agent tries it (xce_protocol/replicas.py): a host credential any entry issued
is presented to every entry.
"""

from __future__ import annotations

import ipaddress
import urllib.parse

from xce_protocol.replicas import MAX_URLS, URL, usable
from xce_protocol.validation import Checker, describe
from xce_protocol.yamlsource import LineDict, LineList

EXPECTED = "an http:// or https:// URL"
_KEY = "controller.url"


def parse_urls(node: LineDict, c: Checker) -> tuple[str, ...] | None:
    """The configured URLs (trailing / removed), or None after reporting every problem."""
    if "url" not in node:
        c.report(_KEY, f"{EXPECTED} or a list of them", "nothing", node.line)
        return None
    value = node["url"]
    plain = _plain_http(node, c)
    if not isinstance(value, LineList):
        one = _entry(value, _KEY, c.line_of(node, "url"), plain, c)
        return None if one is None else (one,)
    line = c.line_of(node, "url")
    if not 1 <= len(value) <= MAX_URLS:
        c.report(_KEY, f"a list of 1 to {MAX_URLS} URLs", f"{len(value)} entries", line)
        return None
    urls = [_entry(v, f"{_KEY}[{i}]", value.item_lines[i], plain, c) for i, v in enumerate(value)]
    if any(u is None for u in urls):
        return None
    found = tuple(u for u in urls if u is not None)
    for index, url in enumerate(found):
        if url in found[:index]:
            c.report(f"{_KEY}[{index}]", "a URL not listed before", describe(url), line)
            return None
    return found


def _plain_http(node: LineDict, c: Checker) -> bool | None:
    plain = node.get("plain_http", False)
    if not isinstance(plain, bool):
        c.report(
            "controller.plain_http", "true or false", describe(plain), c.line_of(node, "plain_http")
        )
        return None
    return plain


def _entry(value: object, path: str, line: int, plain: bool | None, c: Checker) -> str | None:
    if not isinstance(value, str) or not URL.fullmatch(value) or not usable(value):
        got = describe(value)
        if isinstance(value, str) and value.count("://") > 1:
            got += " (several URLs are written as a YAML list)"
        c.report(path, EXPECTED, got, line)
        return None
    if plain is None:  # reported already
        return None
    if not (value.startswith("https://") or plain or loopback_url(value)):
        # Join tokens and host credentials travel in the clear over http: only to loopback,
        # or when the config says so with `plain_http: true` (a private network, a test rig).
        expected = "an https:// URL (http:// only to loopback, or with plain_http: true)"
        c.report(path, expected, describe(value), line)
        return None
    return value.rstrip("/")


def loopback_url(url: str) -> bool:
    if not URL.fullmatch(url):  # a URL parsers read differently is nobody's loopback
        return False
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
