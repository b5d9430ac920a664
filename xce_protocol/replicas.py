"""Which of the controller's URLs a request goes to, when it has several (its replicas).

The agent's `controller.url` as a list, the worker's comma-separated XCE_CONTROLLER_URL, and
`xcecli --url` (or XCE_CONTROLLER_URL) with a comma-separated list all follow these rules.

The agent stays on one URL while it answers and moves to the next in the list when it cannot
serve: no answer at all (a transport failure: refused, reset, timed out, TLS) or a gateway
status that says this replica cannot serve now (503, and 502/504 from a proxy in front of
it). Anything else is the controller's word, given by whichever replica answered, and is
taken as it is: a 401 from a replica is a refusal, never a reason to ask another one. A 503
is never a refusal (xce_protocol.protocol.classify), whichever URL gave it.

An answer whose code is `refused_outcome_unknown` never moves on, whatever its status: the
replica lost its database connection after the change's COMMIT was sent, so the change may be
stored, and another replica would make it a second time. The caller reads the state back, or
repeats a change it may repeat (a join from the same boot, a heartbeat, a report) where it was.

One request tries each URL at most once, starting from the current one, while its budget
lasts; the link and the watch share the current URL, and a thread that saw a URL fail moves
on only if no other thread has moved already (two failing threads must not move twice and
land back on the dead one).
"""

from __future__ import annotations

from xce_protocol.reasons import Reason

OUTCOME_UNKNOWN = Reason.REFUSED_OUTCOME_UNKNOWN.value


MOVE_STATUSES = frozenset({502, 503, 504})
MIN_ATTEMPT = 0.5  # seconds of budget below which no further URL is tried in this request


def moves_on(status: int | None, code: str = "") -> bool:
    """Whether an answer sends the request to the next URL; None is no answer at all, `code`
    the answer's (code_of)."""
    if code == OUTCOME_UNKNOWN:
        return False
    return status is None or status in MOVE_STATUSES


def code_of(body: object) -> str:
    """The `code` of an answer's parsed JSON body; "" when it has none."""
    code = body.get("code") if isinstance(body, dict) else None
    return code if isinstance(code, str) else ""


def attempts(current: int, count: int) -> list[int]:
    """The URLs one request may try, in order: the current one, then each other once."""
    return [(current + step) % count for step in range(count)]


def after_failure(current: int, failed: int, count: int) -> int:
    """The URL to use from now on, once `failed` could not serve: the one after it, unless
    another thread has already moved away from it."""
    return (failed + 1) % count if current == failed else current


def another_try(remaining: float, tried: int, count: int) -> bool:
    """Whether a request that just failed on a URL goes on to the next one now."""
    return tried < count and remaining >= MIN_ATTEMPT
