"""The agent's side of the controller protocol (version 1): requests it sends, answers it trusts.

Only a well-formed answer counts: a JSON object whose `protocol` is a string of major version 1
(a number, or no version at all, is not an answer of this protocol). A refusal stops the worker
only when it is a 410 whose body says `decommissioned` and names this host and this instance;
anything else (garbage, another host, a 5xx, a redirect, a timeout, a TLS failure) is a failed
contact and leaves the worker alone.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

from xce_protocol.reasons import Reason

# 1.1: host credentials issued at join, sent on every later call. 1.2: times in answers are
# RFC 3339 in UTC (they were epoch seconds); heartbeats carry the agent's version. 1.3: the
# `stop` notice, a planned stop of the agent (docs/protocol.md).
PROTOCOL = "1.3"
CREDENTIALS_SINCE = "1.1"  # the oldest controller this agent can work with (docs/upgrades.md)
MAJOR = PROTOCOL.split(".", maxsplit=1)[0]
BUSY = frozenset({429, 503})  # the only answers whose Retry-After is honoured
MAX_COMPONENTS = 64  # a heartbeat reports at most this many (an agent's config has no more)
MAX_LAST_EXIT = 512  # characters of a component's last exit a heartbeat carries


class Outcome(enum.Enum):
    ACCEPTED = "accepted"  # a well-formed answer: joined, heartbeat taken, watch answered
    DECOMMISSIONED = "decommissioned"  # a well-formed refusal naming this host and instance
    REFUSED = "refused"  # unmatched, duplicate, unauthorized: keep trying, say why
    RETRY = "retry"  # unreachable, 5xx, garbage, wrong host: keep trying
    INCOMPATIBLE = "incompatible"  # the controller speaks a newer major version


@dataclass(frozen=True)
class Answer:
    outcome: Outcome
    detail: str = ""
    body: dict[str, Any] = field(default_factory=dict)
    retry_after: float | None = None


@dataclass(frozen=True)
class Identity:
    """Who this agent speaks for."""

    host: str
    instance_id: str


def _major(body: dict[str, Any]) -> str | None:
    version = body.get("protocol")
    if not isinstance(version, str) or not version:
        return None
    return version.split(".")[0]


def classify(status: int, body: Any, me: Identity, retry_after: float | None = None) -> Answer:
    """Turn an HTTP status and parsed JSON body into what the agent may act on."""
    answer = _classify(status, body, me, retry_after)
    # The detail quotes the controller (a message, a reason, a state) into logs and `status`:
    # a newline would forge log lines and an escape sequence would reach the operator's terminal.
    return replace(answer, detail=printable(answer.detail))


def printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)


def _classify(status: int, body: Any, me: Identity, retry_after: float | None) -> Answer:
    # Retry-After on any other answer (a 500, garbage, a 404 page) would let one bad answer
    # silence the link for minutes, and with it a later refusal.
    retry_after = retry_after if status in BUSY else None
    if 300 <= status < 400:
        return Answer(Outcome.RETRY, f"HTTP {status} redirect: not followed")
    if status >= 500 or not isinstance(body, dict):
        what = f"HTTP {status}" if status >= 500 else f"HTTP {status} with a malformed body"
        if isinstance(body, dict) and body.get("code") == Reason.REFUSED_OUTCOME_UNKNOWN.value:
            # Never a refusal: the change may be stored; a retry of it meets what was.
            what += " outcome_unknown: the change may have been stored"
        return Answer(Outcome.RETRY, what, retry_after=retry_after)
    major = _major(body)
    if major is None:
        shown = repr(body.get("protocol"))[:40] if "protocol" in body else "no protocol version"
        return Answer(
            Outcome.RETRY,
            f"HTTP {status} answer with {shown} instead of a protocol version string: ignored",
            retry_after=retry_after,
        )
    if major != MAJOR:
        return Answer(
            Outcome.INCOMPATIBLE,
            f"controller speaks protocol {body.get('protocol')}, this agent {PROTOCOL}",
        )
    if status == 410:
        return _refusal(body, me)
    if 200 <= status < 300:
        return _accepted(body, me)
    if status in BUSY:
        return Answer(Outcome.RETRY, f"HTTP {status}: busy", retry_after=retry_after)
    message = body.get("message") if isinstance(body.get("message"), str) else ""
    kind = body.get("error") if isinstance(body.get("error"), str) else "error"
    return Answer(Outcome.REFUSED, f"HTTP {status} {kind}: {message}"[:300], body)


def _refusal(body: dict[str, Any], me: Identity) -> Answer:
    if body.get("error") != "decommissioned":
        return Answer(Outcome.RETRY, "HTTP 410 without a decommission refusal")
    host, instance = body.get("host"), body.get("instance_id")
    reason = body.get("reason")
    if not isinstance(host, str) or not isinstance(instance, str) or not isinstance(reason, str):
        return Answer(Outcome.RETRY, "malformed decommission refusal")
    if host != me.host or instance != me.instance_id:
        return Answer(
            Outcome.RETRY,
            f"decommission refusal for {host or '-'}/{instance or '-'}, not for "
            f"{me.host}/{me.instance_id}: ignored",
        )
    return Answer(Outcome.DECOMMISSIONED, reason or "decommissioned", body)


def _accepted(body: dict[str, Any], me: Identity) -> Answer:
    host, state = body.get("host"), body.get("state")
    if host != me.host or not isinstance(state, str):
        return Answer(Outcome.RETRY, "answer for another host or without a state: ignored")
    return Answer(Outcome.ACCEPTED, state, body)


MAX_NAME = 255  # a template name goes into the worker's environment (XCE_TEMPLATE)


def template_of(body: dict[str, Any]) -> dict[str, Any] | None:
    """The join answer's template, or None if the worker could not be started with it."""
    template = body.get("template")
    if not isinstance(template, dict):
        return None
    name = template.get("name")
    # A NUL byte, or a value too long for exec (128 KiB a variable), would fail every start
    # of the worker until its crash loop stopped it for good.
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME or not name.isprintable():
        return None
    slots = template.get("slots")
    if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
        return None
    return template


def number(body: dict[str, Any], key: str, default: float) -> float:
    value = body.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 86400:
        return float(value)
    return default
