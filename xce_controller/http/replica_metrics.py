"""The metrics of a replica on a shared store (docs/ha.md): which replica it is, how far it
follows the others, how long the store takes, and how often a failover or a race was met.
Read from the replica at scrape time."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from xce_controller.replicas import Replica


class ReplicaCollector:
    def __init__(self, replica: Replica) -> None:
        self.replica = replica

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        r = self.replica
        info = GaugeMetricFamily(
            "xce_controller_replica_info", "This replica (1), by its id.", labels=["replica"]
        )
        info.add_metric([r.id], 1)
        yield info
        yield GaugeMetricFamily(
            "xce_controller_replica_listener_up",
            "1 while the replica's LISTEN connection is up (else the poll alone follows).",
            value=1 if r.listener is not None and r.listener.connected.is_set() else 0,
        )
        yield GaugeMetricFamily(
            "xce_controller_replica_listener_lag_seconds",
            "From the latest NOTIFY's arrival to its facts applied here.",
            value=r.lag,
        )
        counters = (
            ("facts_applied", "Facts other replicas committed, applied here.", r.applied),
            (
                "stale_changes",
                "Changes decided again: another replica moved the log first.",
                r.stale,
            ),
            ("reloads", "Full reloads of the state from the store.", r.reloads),
            (
                "liveness_restarts",
                "Times the shared heartbeat table was found begun anew (a failover, a crash): "
                "each gives every host a fresh grace.",
                r.liveness_restarts,
            ),
            ("store_commits", "Commits to the store.", r.commits),
            ("store_commit_seconds", "Time spent in commits to the store.", r.commit_seconds),
            ("store_read_seconds", "Time spent reading the log to catch up.", r.store_seconds),
            ("store_reads", "Reads of the log made to catch up.", r.reads.reads),
            (
                "catch_ups",
                "Requests and timer passes that waited for a read of the log (one read serves "
                "every one that arrived before it began).",
                r.reads.calls,
            ),
            (
                "store_deadline_cuts",
                "Calls to the store cut at their deadline: the database did not answer.",
                r.store.deadline_cuts,
            ),
            (
                "lock_refusals",
                "Changes refused at once and decided again later: a lock they need (the append "
                "lock, a lease's row) was held by a session that did not go on (a replica "
                "stopped in its transaction).",
                r.store.lock_refusals,
            ),
        )
        for name, text, value in counters:
            yield CounterMetricFamily(f"xce_controller_replica_{name}", text, value=value)


def register(registry: CollectorRegistry, replica: Replica | None) -> None:
    if replica is not None:
        registry.register(ReplicaCollector(replica))
