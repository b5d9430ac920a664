"""What `xcecli` says when the controller refuses, cannot be reached, or cannot tell whether a
change was made (each with its exit code).

A failed connection is named the way an operator debugs it: refused (nothing listens there),
timed out (a firewall, a dead host), name not resolved (DNS), TLS (a certificate or a plain-http
port), rather than the name of a requests exception class.
"""

from __future__ import annotations

import errno
import socket
import ssl
from collections.abc import Iterator, Sequence

import requests

from xce_protocol.errors import XceError


class ControllerRefused(XceError):
    """The controller answered with an error status."""

    exit_code = 1


class ControllerUnreachable(XceError):
    """No answer from the controller at all."""

    exit_code = 3


class OutcomeUnknown(XceError):
    """The controller lost its database's answer to the change: it may have been made."""

    exit_code = 4


# A URL a request tried, and how it failed there: no answer (the exception) or a status that
# sent the request on to the next URL.
Failure = tuple[str, "requests.RequestException | int"]


def unreachable(tried: Sequence[Failure], client_cert: bool = False) -> ControllerUnreachable:
    """The error for a request that got no usable answer: each URL it tried (those only), how
    each failed, and for the TLS failures an operator meets first, the option that is missing.
    The last URL tried is the one whose failure ended the request."""
    url, last = tried[-1]
    why = _how(last)
    hint = _hint(url, why, client_cert)
    if len(tried) == 1:
        return ControllerUnreachable(f"cannot reach {url}: {why}{hint}")
    each = ", ".join(f"{where} ({_how(failed)})" for where, failed in tried)
    return ControllerUnreachable(f"cannot reach {each}{hint}")


def _how(failed: requests.RequestException | int) -> str:
    return f"HTTP {failed}" if isinstance(failed, int) else why_unreachable(failed)


def outcome_unknown(url: str, method: str, path: str) -> OutcomeUnknown:
    """The error for a change whose outcome the controller at `url` could not tell."""
    return OutcomeUnknown(
        f"{url} lost its database's answer to {method} {path}: the change may have been "
        f"made, and was not sent to another URL; check with `{check_verb(path)}` before "
        "running it again"
    )


def sent_unanswered(
    url: str, method: str, path: str, exc: requests.RequestException, client_cert: bool = False
) -> OutcomeUnknown:
    """The error for a change whose connection broke once it was sent (a reset, a read
    timeout): the controller may have made it, so it is not sent to another URL either."""
    why = why_unreachable(exc)
    how = f"{why}{_hint(url, why, client_cert)}"
    return OutcomeUnknown(
        f"{url} did not answer {method} {path} once it was sent ({how})"
        f": the change may have been made, and was not sent to another URL; check with "
        f"`{check_verb(path)}` before running it again"
    )


def check_verb(path: str) -> str:
    """The command that shows whether the change at `path` was made."""
    parts = path.split("?", 1)[0].strip("/").split("/")  # v1, collection, name, action
    collection = parts[1] if len(parts) > 1 else ""
    if collection == "hosts" and len(parts) > 2:
        return f"xcecli host {parts[2]}"
    if collection in ("jobs", "expected", "to-return"):
        return f"xcecli {collection}"
    return "xcecli events"


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
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return "the answer broke off before its end"  # a stream cut without a reset
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
