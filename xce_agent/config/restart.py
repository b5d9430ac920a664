"""A component's `restart:` policy and backoff, checked into a RestartSpec."""

from __future__ import annotations

from xce_agent.supervision.spec import RestartPolicy, RestartSpec
from xce_protocol.validation import Checker, describe, join_path
from xce_protocol.yamlsource import LineDict


def parse_restart(node: LineDict, p: str, c: Checker) -> RestartSpec:
    """The policy; the default one after a reported problem (the caller's mark tells)."""
    base = RestartSpec()
    if "restart" not in node:
        return base
    r = c.mapping(node, "restart", p)
    if r is None:
        return base
    rp = join_path(p, "restart")
    c.allowed_keys(
        r,
        rp,
        (
            "policy",
            "initial_delay",
            "delay",
            "max_delay",
            "multiplier",
            "jitter",
            "reset_after",
            "give_up",
        ),
    )
    mark = c.mark()
    policy = c.choice(r, "policy", rp, [x.value for x in RestartPolicy], default=base.policy.value)
    values = (
        c.duration(r, "initial_delay", rp, default=base.initial_delay),
        c.duration(r, "delay", rp, default=base.delay),
        c.duration(r, "max_delay", rp, default=base.max_delay),
        c.number(r, "multiplier", rp, default=base.multiplier, minimum=1.0, maximum=100.0),
        c.number(r, "jitter", rp, default=base.jitter, minimum=0.0, maximum=1.0),
        c.duration(r, "reset_after", rp, default=base.reset_after),
    )
    starts, window = base.give_up_starts, base.give_up_window
    if "give_up" in r:
        g = c.mapping(r, "give_up", rp)
        gp = join_path(rp, "give_up")
        if g is not None:
            c.allowed_keys(g, gp, ("starts", "window"))
            starts = c.integer(g, "starts", gp, starts, minimum=1, maximum=10000, required=True)
            window = c.duration(g, "window", gp, window, positive=True, required=True)
    if c.failed_since(mark):
        return base
    initial, delay, max_delay, mult, jitter, reset = values
    if max_delay < max(initial, delay):
        c.report(
            join_path(rp, "max_delay"),
            "a duration >= initial_delay and delay",
            describe(r.get("max_delay", max_delay)),
            c.line_of(r, "max_delay"),
        )
        return base
    return RestartSpec(
        RestartPolicy(policy), initial, delay, max_delay, mult, jitter, reset, starts, window
    )
