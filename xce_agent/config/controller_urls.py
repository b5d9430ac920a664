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

from xce_protocol import url_list
from xce_protocol.url_list import URL
from xce_protocol.validation import Checker, describe
from xce_protocol.yamlsource import LineDict


def parse_urls(node: LineDict, c: Checker) -> tuple[str, ...] | None:
    """The configured URLs (trailing / removed), or None after reporting every problem."""
    plain = _plain_http(node, c) if "url" in node else None

    def allowed(url: str, path: str, line: int) -> bool:
        if plain is None:  # reported already (or no url: reported as missing)
            return False
        if not (url.startswith("https://") or plain or loopback_url(url)):
            # Join tokens and host credentials travel in the clear over http: only to
            # loopback, or when the config says so with `plain_http: true` (a private
            # network, a test rig).
            expected = "an https:// URL (http:// only to loopback, or with plain_http: true)"
            c.report(path, expected, describe(url), line)
            return False
        return True

    return url_list.parse(node, c, allowed)


def _plain_http(node: LineDict, c: Checker) -> bool | None:
    plain = node.get("plain_http", False)
    if not isinstance(plain, bool):
        c.report(
            "controller.plain_http", "true or false", describe(plain), c.line_of(node, "plain_http")
        )
        return None
    return plain


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
