"""What `xcecli` says when the controller refuses or cannot be reached (each with its exit code).

A failed connection is named the way an operator debugs it: refused (nothing listens there),
timed out (a firewall, a dead host), name not resolved (DNS), TLS (a certificate or a plain-http
port), rather than the name of a requests exception class.
"""

from __future__ import annotations

import errno
import socket
import ssl
from collections.abc import Iterator

import requests

from xce_protocol.errors import XceError


class ControllerRefused(XceError):
    """The controller answered with an error status."""

    exit_code = 1


class ControllerUnreachable(XceError):
    """No answer from the controller at all."""

    exit_code = 3


def unreachable(
    url: str, exc: requests.RequestException, client_cert: bool = False
) -> ControllerUnreachable:
    """The error for a request that got no answer, naming why, and for the TLS failures an
    operator meets first, the option that is missing."""
    why = why_unreachable(exc)
    return ControllerUnreachable(f"cannot reach {url}: {why}{_hint(url, why, client_cert)}")


def _hint(url: str, why: str, client_cert: bool) -> str:
    https = url.startswith("https://")
    if why.startswith("TLS failed") and ("issuer" in why or "self-signed" in why):
        return ": for a private CA, --ca-file or $XCE_CONTROLLER_CA_FILE"
    if why == "TLS failed (wrong version number)":
        return ": is it plain HTTP there (http://)?"
    if why == "connection reset" and not https:
        return ": is it HTTPS there (https://)?"
    if why == "connection reset" and not client_cert:
        # TLS 1.3: a controller with --tls-client-ca closes once the handshake is over.
        return (
            ": a controller requiring client certificates closes like this "
            "(--client-cert-file, --client-key-file)"
        )
    return ""


def why_unreachable(exc: BaseException) -> str:
    if isinstance(exc, requests.exceptions.SSLError):
        return f"TLS failed ({_tls_detail(exc)})"
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return "timed out connecting"
    if isinstance(exc, requests.exceptions.Timeout):
        return "timed out waiting for the answer"
    for cause in _causes(exc):
        if isinstance(cause, socket.gaierror):
            return "name not resolved"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, ssl.SSLError):
            return f"TLS failed ({_tls_detail(cause)})"
        if isinstance(cause, (socket.timeout, TimeoutError)):
            return "timed out"
        if isinstance(cause, ConnectionResetError):
            return "connection reset"
        if isinstance(cause, OSError) and cause.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return "no route to the host"
    return f"connection failed ({type(exc).__name__})"


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception and everything it wraps (urllib3 keeps the socket's error two deep)."""
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        item = todo.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        todo += [*item.args, getattr(item, "reason", None), item.__cause__, item.__context__]


def _tls_detail(exc: BaseException) -> str:
    for cause in _causes(exc):
        if isinstance(cause, ssl.SSLCertVerificationError):
            return cause.verify_message or "certificate not trusted"
        if isinstance(cause, ssl.SSLError) and cause.reason:
            return str(cause.reason).replace("_", " ").lower()
    return "handshake failed"
