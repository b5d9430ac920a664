"""A component's `singleton:` key: run on one host of the cluster at a time, under a lease.

`singleton: {lease: NAME, ttl: 15s}`, `singleton: true` (lease named after the component,
ttl 15s) or `singleton: false`. Components of the provisioner role are singletons unless
they say `false` (or the agent has no controller, so no cluster). The stop timeout must fit
inside the lease (SingletonSpec.max_stop_timeout): without one in the config a singleton
gets the longest that fits, up to the usual 10s.
"""

from __future__ import annotations

import re

from xce_agent.supervision.spec import SingletonSpec
from xce_protocol import names
from xce_protocol.validation import Checker, describe, join_path
from xce_protocol.yamlsource import LineDict

KEY = "singleton"
DEFAULT_TTL = 15.0
MIN_TTL = 1.0
MAX_TTL = 3600.0
SINGLETON_ROLES = ("provisioner",)
_LEASE = re.compile(names.LEASE_NAME)


def parse_singleton(
    role: str, name: str, node: LineDict, p: str, c: Checker, clustered: bool
) -> tuple[bool, SingletonSpec | None]:
    """(ok, spec): spec is None for a component that is not a singleton. Without a
    controller (`clustered` false) there is no cluster to be the one host of: the role's
    default does not apply and an explicit singleton is refused."""
    value = node.get(KEY, role in SINGLETON_ROLES and clustered)
    default_lease = name.lower()
    if value is False:
        return True, None
    if not clustered:
        expected = "a controller section (the lease of a singleton is held there)"
        c.report(join_path(p, KEY), expected, "no controller", c.line_of(node, KEY))
        return False, None
    if value is True:
        return True, SingletonSpec(default_lease, DEFAULT_TTL)
    path = join_path(p, KEY)
    if not isinstance(value, LineDict):
        expected = "true, false or a mapping with lease and ttl"
        c.report(path, expected, describe(value), c.line_of(node, KEY))
        return False, None
    c.allowed_keys(value, path, ("lease", "ttl"))
    lease = c.string(
        value,
        "lease",
        path,
        required=False,
        default=default_lease,
        pattern=_LEASE,
        expected="a lease name (lower-case letters, digits, . _ -, at most 63)",
    )
    mark = c.mark()
    ttl = c.duration(value, "ttl", path, default=DEFAULT_TTL, minimum=MIN_TTL)
    if ttl > MAX_TTL:
        at = c.line_of(value, "ttl")
        c.report(join_path(path, "ttl"), "a duration of at most 1h", describe(value["ttl"]), at)
    if lease is None or c.failed_since(mark):
        return False, None
    return True, SingletonSpec(lease, ttl)


def singleton_stop_timeout(
    spec: SingletonSpec, node: LineDict, p: str, stop_timeout: float, c: Checker
) -> float:
    """The stop timeout a singleton runs with: the longest that fits after a reported
    problem (the configured one too long to be dead before the lease can expire)."""
    fits = spec.max_stop_timeout
    if "stop_timeout" not in node:
        return min(stop_timeout, fits)
    if stop_timeout <= fits:
        return stop_timeout
    c.report(
        join_path(p, "stop_timeout"),
        f"at most {fits:g}s for a singleton with ttl {spec.ttl:g}s (the component must be "
        "dead before its lease can expire, with half the TTL left for renewals; raise the "
        "ttl or shorten the stop timeout)",
        describe(node["stop_timeout"]),
        c.line_of(node, "stop_timeout"),
    )
    return fits
