"""The `controller` section: whom to join (its URLs, or its replicas'), how to trust it and
be trusted by it (CA, client certificate, join token), its timeouts and the drain on stop."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path

from xce_agent.config.controller_urls import parse_urls
from xce_protocol import names
from xce_protocol.validation import Checker, describe, join_path
from xce_protocol.yamlsource import LineDict, SourceError, read_regular_file

MAX_DRAIN_ON_STOP = 86400.0  # a day: a drain bound beyond it is a typo


@dataclass(frozen=True)
class ControllerConfig:
    url: str  # the first of the controller's URLs (controller_urls.py)
    ca_file: Path | None = None
    token: str | None = field(default=None, repr=False)
    token_file: Path | None = None
    timeout: float = 10.0
    max_retry_delay: float = 30.0  # joins back off up to this (and below half the grace)
    other_urls: tuple[str, ...] = ()  # the replicas listed after it, in order
    client_cert_file: Path | None = None  # shown to a controller that asks for one (mTLS)
    client_key_file: Path | None = None
    # `xce-agent stop` first drains the host for up to this long (0: no drain; planned_stop.py)
    drain_on_stop: float = 60.0

    @property
    def urls(self) -> tuple[str, ...]:
        return (self.url, *self.other_urls)


def parse_controller(doc: LineDict, c: Checker) -> ControllerConfig | None:
    node = c.mapping(doc, "controller", "", required=False)
    if node is None:
        return None
    p = "controller"
    c.allowed_keys(
        node,
        p,
        (
            "url",
            "ca_file",
            "client_cert_file",
            "client_key_file",
            "token",
            "token_file",
            "timeout",
            "max_retry_delay",
            "drain_on_stop",
            "plain_http",
        ),
    )
    urls = parse_urls(node, c)
    ca_file = _existing_file(node, "ca_file", p, c)
    client = _client_pair(node, c)
    token = c.string(node, "token", p, required=False)
    token_file = _existing_file(node, "token_file", p, c)
    if token is not None and token_file is not None:
        c.report(
            join_path(p, "token_file"),
            "either token or token_file, not both",
            "both",
            c.line_of(node, "token_file"),
        )
    if token_file is not None:
        token = _read_token(token_file, node, c)
    if token is not None and not names.is_bearer_token(token):
        key = "token_file" if token_file is not None else "token"
        c.report(  # the value is not shown: it is a secret
            join_path(p, key),
            "a token of printable ASCII characters without spaces",
            "a token with spaces, control or non-ASCII characters",
            c.line_of(node, key),
        )
        token = None
    timeout = c.duration(node, "timeout", p, default=10.0, positive=True)
    retry = c.duration(node, "max_retry_delay", p, default=30.0, minimum=1.0)
    drain = c.duration(node, "drain_on_stop", p, default=60.0, maximum=MAX_DRAIN_ON_STOP)
    if urls is None or timeout is None or retry is None:
        return None
    return ControllerConfig(
        urls[0], ca_file, token, token_file, timeout, retry, urls[1:], *client, drain_on_stop=drain
    )


def _client_pair(node: LineDict, c: Checker) -> tuple[Path | None, Path | None]:
    """The client certificate and its key, both or neither."""
    cert = _existing_file(node, "client_cert_file", "controller", c)
    key = _existing_file(node, "client_key_file", "controller", c)
    for given, other in (
        ("client_cert_file", "client_key_file"),
        ("client_key_file", "client_cert_file"),
    ):
        if given in node and other not in node:
            c.report(
                join_path("controller", other),
                f"a file path beside {given}",
                "nothing",
                c.line_of(node, given),
            )
            return None, None
    if cert is None or key is None:
        return None, None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as exc:
        c.report(
            "controller.client_cert_file",
            "a PEM certificate and, in client_key_file, its unencrypted key",
            str(getattr(exc, "reason", None) or exc).replace("_", " ").lower(),
            c.line_of(node, "client_cert_file"),
        )
        return None, None
    return cert, key


def _existing_file(node: LineDict, key: str, path: str, c: Checker) -> Path | None:
    value = c.string(node, key, path, required=False, expected="an absolute path to a file")
    if value is None:
        return None
    if not value.startswith("/") or not Path(value).is_file():
        c.report(
            join_path(path, key),
            "an absolute path to an existing file",
            describe(value),
            c.line_of(node, key),
        )
        return None
    return Path(value)


def _read_token(token_file: Path, node: LineDict, c: Checker) -> str | None:
    try:
        token = read_regular_file(token_file, 64 * 1024).decode("utf-8").strip()
    except (SourceError, UnicodeDecodeError) as exc:
        detail = str(exc) if isinstance(exc, SourceError) else "not UTF-8 text"
        c.report(
            "controller.token_file",
            "a readable file holding the token",
            f"an unreadable file ({detail})",
            c.line_of(node, "token_file"),
        )
        return None
    if not token:
        c.report(
            "controller.token_file",
            "a file holding the token",
            "an empty file",
            c.line_of(node, "token_file"),
        )
        return None
    return token
