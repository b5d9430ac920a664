"""A component's `liveness_probe:` (exec, tcp or http, with its timing), into a ProbeSpec."""

from __future__ import annotations

import re
import urllib.parse

from xce_agent.config.command import parse_command
from xce_agent.config.program_access import Account
from xce_agent.supervision.spec import ProbeKind, ProbeSpec
from xce_protocol.validation import Checker, describe, join_path
from xce_protocol.yamlsource import LineDict

URL = re.compile(r"^https?://[^\s/]+(/\S*)?$")


def parse_probe(
    node: LineDict, p: str, c: Checker, runs_as: Account | None = None
) -> ProbeSpec | None:
    """The probe; an exec probe runs as the component's user, so its program is checked so."""
    if "liveness_probe" not in node:
        return None
    r = c.mapping(node, "liveness_probe", p)
    if r is None:
        return None
    pp = join_path(p, "liveness_probe")
    c.allowed_keys(
        r, pp, ("exec", "tcp", "http", "initial_delay", "period", "timeout", "failure_threshold")
    )
    kinds = [k for k in ("exec", "tcp", "http") if k in r]
    if len(kinds) != 1:
        c.report(pp, "exactly one of exec, tcp, http", f"{len(kinds)} of them", r.line)
        return None
    mark = c.mark()
    base = ProbeSpec(ProbeKind.EXEC)  # its timing is the default one
    initial = c.duration(r, "initial_delay", pp, default=base.initial_delay)
    period = c.duration(r, "period", pp, default=base.period, positive=True)
    timeout = c.duration(r, "timeout", pp, default=base.timeout, positive=True)
    threshold = c.integer(
        r, "failure_threshold", pp, default=base.failure_threshold, minimum=1, maximum=1000
    )
    kind = kinds[0]
    probe: ProbeSpec | None = None
    if kind == "exec":
        argv = parse_command(r, "exec", pp, c, {}, runs_as)
        if argv:
            probe = ProbeSpec(ProbeKind.EXEC, command=tuple(argv))
    elif kind == "tcp":
        value = c.string(r, "tcp", pp, expected="HOST:PORT")
        host, _, port = (value or "").rpartition(":")
        if value is not None and (not host or not port.isdigit() or not 0 < int(port) < 65536):
            c.report(
                join_path(pp, "tcp"),
                "HOST:PORT with a port from 1 to 65535",
                describe(value),
                c.line_of(r, "tcp"),
            )
        elif value is not None:
            probe = ProbeSpec(ProbeKind.TCP, host=host.strip("[]"), port=int(port))
    else:
        url = c.string(r, "http", pp, pattern=URL, expected="an http:// or https:// URL")
        if url is not None and not _url_parses(url):  # every probe would fail: a restart loop
            c.report(
                join_path(pp, "http"),
                "a URL with a port from 1 to 65535",
                describe(url),
                c.line_of(r, "http"),
            )
        elif url is not None:
            probe = ProbeSpec(ProbeKind.HTTP, url=url)
    if probe is None or c.failed_since(mark):
        return None
    return ProbeSpec(
        probe.kind,
        probe.command,
        probe.host,
        probe.port,
        probe.url,
        initial,
        period,
        timeout,
        int(threshold),
    )


def _url_parses(url: str) -> bool:
    try:
        port = urllib.parse.urlsplit(url).port
    except ValueError:  # a port over 65535, an unclosed [IPv6 literal
        return False
    return port != 0
