"""The leases' part of the controller's `/metrics`: who holds what, with which fencing token,
and how often leases are granted, taken over, renewed, released and left to expire.

Gauges are read from the lease desk at scrape time. Counters are fed by the desk as a watcher
(xce_controller.lease_desk.LeaseWatcher): grants by reason code (lease_granted,
lease_taken_over, lease_regranted) and releases from the facts it stores, renewals as they are
answered, and each expiry once, when a request, a listing or a scrape first finds it. Lease
names are few and configured by the operator, so they are labels; a holder's host name is a
label only of the holder gauge, which has one series per lease.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric

from xce_controller.core import leases
from xce_controller.core.model import Fact
from xce_controller.lease_desk import LeaseDesk
from xce_controller.store.base import StaleState, StorageUnavailable
from xce_protocol.reasons import Reason

STATES = ("held", "expired", "free")
GRANT_CODES = (Reason.LEASE_GRANTED, Reason.LEASE_TAKEN_OVER, Reason.LEASE_REGRANTED)


class LeaseCollector:
    """Gauges read from the desk when scraped (after it noticed what expired meanwhile)."""

    def __init__(self, desk: LeaseDesk) -> None:
        self.desk = desk

    def describe(self) -> list[Metric]:
        return []  # computed per scrape

    def collect(self) -> Iterable[Metric]:
        try:
            self.desk.refresh()  # a shared store: what every replica decided
            self.desk.notice_expiries()
        except (StorageUnavailable, StaleState):
            pass  # the database away or busy: what this replica last knew; the scrape still answers
        now = self.desk.monotonic()
        book = self.desk.book.leases
        counts = dict.fromkeys(STATES, 0)
        held = GaugeMetricFamily(
            "xce_controller_lease_held", "1 while the lease is held and live.", labels=["lease"]
        )
        token = GaugeMetricFamily(
            "xce_controller_lease_token",
            "The fencing token of the lease's latest grant (0: never granted).",
            labels=["lease"],
        )
        left = GaugeMetricFamily(
            "xce_controller_lease_expires_in_seconds",
            "Seconds until a held lease expires unless renewed.",
            labels=["lease"],
        )
        holder = GaugeMetricFamily(
            "xce_controller_lease_holder",
            "1 for the host holding the lease.",
            labels=["lease", "host"],
        )
        for name in sorted(book):
            lease = book[name]
            live = lease.live(now)
            counts["held" if live else ("expired" if lease.held else "free")] += 1
            held.add_metric([name], int(live))
            token.add_metric([name], lease.token)
            if live:
                left.add_metric([name], max(0.0, lease.expires - now))
                holder.add_metric([name, lease.host], 1)
        by_state = GaugeMetricFamily(
            "xce_controller_leases",
            "Leases by state: held, expired (its holder stopped renewing), free.",
            labels=["state"],
        )
        for state, n in counts.items():
            by_state.add_metric([state], n)
        yield from (by_state, held, token, left, holder)


class LeaseTally:
    """Counters the desk feeds (LeaseWatcher)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.grants = Counter(
            "xce_controller_lease_grants",
            "Leases granted (each with a new fencing token), by lease and reason code.",
            ["lease", "code"],
            registry=registry,
        )
        self.releases = Counter(
            "xce_controller_lease_releases",
            "Leases given back by their holder.",
            ["lease"],
            registry=registry,
        )
        self.renewals = Counter(
            "xce_controller_lease_renewals",
            "Renewals granted to the holder of a live lease.",
            ["lease"],
            registry=registry,
        )
        self.expiries = Counter(
            "xce_controller_lease_expiries",
            "Grants that ran out with neither a renewal nor a release.",
            ["lease"],
            registry=registry,
        )

    def committed(self, facts: list[Fact]) -> None:
        for fact in facts:
            name = str(fact.data.get("lease", ""))
            if fact.kind == leases.GRANTED:
                self.grants.labels(name, str(fact.data.get("code", ""))).inc()
            elif fact.kind == leases.RELEASED:
                self.releases.labels(name).inc()
            elif fact.kind == leases.FORGOTTEN:  # its series go with it (names are bounded)
                self._drop(name)

    def _drop(self, name: str) -> None:
        series: list[tuple[Counter, tuple[str, ...]]]
        series = [(self.grants, (name, code.value)) for code in GRANT_CODES]
        series += [(c, (name,)) for c in (self.releases, self.renewals, self.expiries)]
        for counter, labels in series:
            with contextlib.suppress(KeyError):
                counter.remove(*labels)

    def renewed(self, lease: leases.Lease) -> None:
        self.renewals.labels(lease.name).inc()

    def expired(self, lease: leases.Lease) -> None:
        self.expiries.labels(lease.name).inc()


def register(registry: CollectorRegistry, desk: LeaseDesk) -> LeaseTally:
    """The lease metrics in `registry`. The collector goes first: its scrape notices the
    expiries, which the counters collected after it then already show."""
    registry.register(LeaseCollector(desk))
    tally = LeaseTally(registry)
    desk.watchers.append(tally)
    return tally
