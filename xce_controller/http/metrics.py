"""The controller's Prometheus metrics, served at `/metrics`.

Gauges (hosts by state and template, the to-return list, overdue hosts) are computed from the
controller's state when scraped, so they are never out of step with it. Counters and
histograms are folded from the facts as they are committed (`FactTally.observe`), plus the
refusals and request latencies the API reports; the leases' are in lease_metrics.py. One
registry per controller: tests and the demo run several in one process.
docs/observability.md lists every metric.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from starlette.routing import Match

from xce_controller.core import lifecycle as lc
from xce_controller.core.model import JOINED, Cluster, Fact, Host, HostState
from xce_controller.http import lease_metrics, read_deadline, replica_metrics
from xce_controller.service import Controller
from xce_protocol.reasons import Reason

# Seconds: a drain is a few seconds to hours; a return, minutes to days.
DRAIN_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600)
RETURN_BUCKETS = (10, 30, 60, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 30)
# The methods the API answers; any other (a server may accept any token as a method) is
# labelled "other", or each forged method would be a new series kept for the process's life.
METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"))
RETURNED_FROM = (HostState.OVERDUE, HostState.DECOMMISSIONED, HostState.LOST)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class StateCollector:
    """Gauges read from the controller at scrape time."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl

    def describe(self) -> list[Metric]:
        return []  # computed per scrape; nothing to check at registration

    def collect(self) -> Iterable[Metric]:
        ctl, now = self.ctl, self.ctl.clock()
        hosts = GaugeMetricFamily(
            "xce_controller_hosts", "Hosts by state and template.", labels=["state", "template"]
        )
        counts: dict[tuple[str, str], int] = {
            (s.value, t): 0 for s in HostState for t in ctl.cfg.templates
        }
        for host in ctl.cluster.hosts.values():
            key = (host.state.value, host.template)
            counts[key] = counts.get(key, 0) + 1
        for (state, template), n in sorted(counts.items()):
            hosts.add_metric([state, template], n)
        yield hosts
        yield agent_versions(ctl.cluster.hosts.values())
        overdue = sum(n for (s, _), n in counts.items() if s == HostState.OVERDUE.value)
        yield GaugeMetricFamily(
            "xce_controller_overdue_hosts",
            "Expected instances that did not join by their deadline.",
            value=overdue,
        )
        waiting = lc.to_return(ctl.cluster)
        yield GaugeMetricFamily(
            "xce_controller_to_return_hosts",
            "Instances the provisioner should give back to the provider.",
            value=len(waiting),
        )
        oldest = max((now - since_state(h.history) for h in waiting), default=0.0)
        yield GaugeMetricFamily(
            "xce_controller_to_return_oldest_age_seconds",
            "How long the oldest entry of the to-return list has waited (0 when empty).",
            value=max(0.0, oldest),
        )
        yield GaugeMetricFamily(
            "xce_controller_facts",
            "Facts committed since the database was created.",
            value=ctl.cluster.version,
        )
        yield GaugeMetricFamily(
            "xce_controller_watches_held",
            "Agents' watches (long-polls) held, waiting for a change or the end of their hold.",
            value=ctl.watches_held,
        )
        yield GaugeMetricFamily(
            "xce_controller_storage_available",
            "0 while the database refuses writes (changes are refused), else 1.",
            value=0 if ctl.storage_down else 1,
        )
        yield CounterMetricFamily(
            "xce_controller_storage_errors",
            "Changes the database failed to store since start (none of them was made).",
            value=ctl.storage_errors,
        )
        yield CounterMetricFamily(
            "xce_controller_stalls",
            "Stalls ended since start: the controller could not hear its hosts (its loop "
            "stopped, or its database away) past stall_watch.STALL; each gave every host a "
            "fresh grace.",
            value=ctl.stall.stalls,
        )
        yield CounterMetricFamily(
            "xce_controller_read_timeouts",
            "Connections closed because a request did not arrive within "
            "limits.request_read_timeout (slow or silent clients).",
            value=read_deadline.CLOSED.total,
        )


def agent_versions(hosts: Iterable[Host]) -> GaugeMetricFamily:
    """Joined hosts (open, closed, draining) by the version their agent reports: a rolling
    upgrade is followed here (`unknown`: the agent did not say)."""
    family = GaugeMetricFamily(
        "xce_controller_agent_versions",
        "Joined hosts by the version of their agent.",
        labels=["version"],
    )
    counts: dict[str, int] = {}
    for host in hosts:
        if host.state in JOINED:
            version = host.agent_version or "unknown"
            counts[version] = counts.get(version, 0) + 1
    for version, n in sorted(counts.items()):
        family.add_metric([version], n)
    return family


def since_state(history: Iterable[Any]) -> float:
    """When a host entered its current state: the time of its last history entry."""
    last = 0.0
    for change in history:
        last = change.at
    return last


class FactTally:
    """Counters and histograms folded from committed facts, labelled with their reason codes
    (xce_protocol.reasons: a small, fixed set, so the label stays bounded)."""

    def __init__(self, registry: CollectorRegistry, cluster: Cluster) -> None:
        def counter(name: str, text: str, labels: list[str]) -> Counter:
            return Counter(name, text, labels, registry=registry)

        self.joins = counter(
            "xce_controller_joins", "Joins accepted, by template and reason code.",
            ["template", "code"],
        )  # fmt: skip
        self.refusals = counter(
            "xce_controller_refusals", "Requests refused, by endpoint and reason code.",
            ["endpoint", "code"],
        )  # fmt: skip
        self.transitions = counter(
            "xce_controller_host_transitions",
            "Host state changes, by the state entered and the reason code.", ["state", "code"],
        )  # fmt: skip
        # Exposed at 0 from the start: increase() cannot count the sample that creates a
        # series, so without it the first loss after a start would escape XceHostsFlapping.
        self.transitions.labels(HostState.LOST.value, Reason.HEARTBEAT_LOST.value)
        self.decommissions = counter(
            "xce_controller_decommissions",
            "Hosts decommissioned, by template and how (drained, drain_timeout_requeued, ...).",
            ["template", "code"],
        )  # fmt: skip
        self.jobs = counter(
            "xce_controller_jobs_ended",
            "Jobs requeued or killed by the controller, by what it did and why.",
            ["action", "code"],
        )  # fmt: skip
        self.drain = Histogram(
            "xce_controller_drain_duration_seconds",
            "From decommission request to decommissioned, by drain policy and how it ended.",
            ["policy", "code"],
            buckets=DRAIN_BUCKETS,
            registry=registry,
        )
        self.returned = Histogram(
            "xce_controller_return_delay_seconds",
            "How long an instance waited on the to-return list before it was returned.",
            buckets=RETURN_BUCKETS,
            registry=registry,
        )
        self.cluster = cluster
        # host key -> (drain start, policy): seeded from hosts draining when we start.
        self._drains = {
            h.key: (h.drain.started_at, h.drain.policy.value)
            for h in cluster.hosts.values()
            if h.drain is not None
        }

    def observe(self, facts: list[Fact], cluster: Cluster) -> None:
        """Count one committed batch; `cluster` is the state after it."""
        self.cluster = cluster
        for fact in facts:
            self._one(fact)

    def _one(self, fact: Fact) -> None:
        d = fact.data
        code = str(d.get("code", ""))
        host = self.cluster.hosts.get(str(d.get("key", "")))
        template = host.template if host is not None else "-"
        if fact.kind == "joined":
            self.joins.labels(template, code).inc()
            self.transitions.labels(str(d.get("state", HostState.OPEN.value)), code).inc()
        elif fact.kind == "drain":
            self._drains[str(d["key"])] = (fact.at, str(d["policy"]))
            self.transitions.labels(HostState.DRAINING.value, code).inc()
        elif fact.kind == "state":
            self._state(fact, template, code)
        elif fact.kind in ("job_requeued", "job_killed"):
            action = "requeued" if fact.kind == "job_requeued" else "killed"
            self.jobs.labels(action, code).inc()

    def _state(self, fact: Fact, template: str, code: str) -> None:
        key, state = str(fact.data["key"]), str(fact.data["state"])
        self.transitions.labels(state, code).inc()
        if state == HostState.DECOMMISSIONED.value:
            started = self._drains.pop(key, None)
            self.decommissions.labels(template, code).inc()
            if started is not None:
                self.drain.labels(started[1], code).observe(max(0.0, fact.at - started[0]))
        elif state == HostState.RETURNED.value:
            host = self.cluster.hosts.get(key)
            if host is not None:
                entered = [c.at for c in host.history if c.state in _RETURNED_FROM]
                if entered:
                    self.returned.observe(max(0.0, fact.at - entered[-1]))
        elif state != HostState.LOST.value:
            self._drains.pop(key, None)  # a lost draining host keeps its drain


_RETURNED_FROM = {s.value for s in RETURNED_FROM}


class Metrics:
    """The controller's registry: state gauges, fact counters, request latency."""

    def __init__(self, ctl: Controller) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StateCollector(ctl))
        self.leases = lease_metrics.register(self.registry, ctl.leases)
        replica_metrics.register(self.registry, ctl.replica)
        self.tally = FactTally(self.registry, ctl.cluster)
        self.latency = Histogram(
            "xce_controller_request_duration_seconds",
            "Time to answer an API request (long-polls included), by endpoint.",
            ["method", "endpoint"],
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        ctl.on_commit.append(lambda facts: self.tally.observe(facts, ctl.cluster))

    def refused(self, endpoint: str, reason: str) -> None:
        self.tally.refusals.labels(endpoint, reason).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def route_of(routes: Iterable[Any], scope: Scope) -> str:
    """The route template a request matched ("/v1/hosts/{name}"), else "other": one series
    per endpoint, never one per host name."""
    for route in routes:
        matches = getattr(route, "matches", None)
        if matches is not None and matches(scope)[0] is Match.FULL:
            return str(getattr(route, "path", "other"))
    return "other"


class LatencyMiddleware:
    """ASGI middleware timing each HTTP request until its last body byte is sent."""

    def __init__(self, app: ASGIApp, metrics: Metrics, routes: Callable[[], Iterable[Any]]):
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.monotonic()
        method = str(scope.get("method", ""))
        method = method if method in METHODS else "other"

        async def timed(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                # The router leaves the matched route in the scope (FastAPI); only requests
                # it did not route (404s, middleware answers) are matched here.
                route = scope.get("route")
                path = getattr(route, "path", None)
                endpoint = str(path) if path else route_of(self.routes(), scope)
                self.metrics.latency.labels(method, endpoint).observe(time.monotonic() - start)

        await self.app(scope, receive, timed)
