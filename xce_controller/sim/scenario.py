"""Scenarios of `xce-controller simulate`: hosts, join delays, losses, reclaims, jobs.

Checked like every config here: each problem on one line with its path and line.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xce_controller.core.config import ClusterConfig, load_cluster_config
from xce_protocol.errors import ConfigError
from xce_protocol.validation import Checker
from xce_protocol.yamlsource import LineDict, SourceError, load_file

DISTRIBUTIONS = ("fixed", "uniform", "exponential", "lognormal")


@dataclass(frozen=True)
class Dist:
    kind: str = "fixed"
    mean: float = 0.0
    low: float = 0.0
    high: float = 0.0
    sd: float = 0.0

    def draw(self, rng: random.Random) -> float:
        if self.kind == "uniform":
            return rng.uniform(self.low, self.high)
        if self.kind == "exponential":
            return rng.expovariate(1 / self.mean) if self.mean > 0 else 0.0
        if self.kind == "lognormal" and self.mean > 0:
            sigma = math.sqrt(math.log(1 + (self.sd / self.mean) ** 2))
            return rng.lognormvariate(math.log(self.mean) - sigma**2 / 2, sigma)
        return self.mean


@dataclass(frozen=True)
class Scenario:
    hosts: int
    duration: float
    seed: int
    template: str
    join_delay: Dist
    never_join: float
    spot_loss_per_hour: float
    reclaims: int
    reclaim_window: tuple[float, float]
    drain_timeout: float
    drain_policy: str
    jobs_per_host: int
    job_duration: Dist
    return_delay: float
    cluster: ClusterConfig = field(repr=False, default_factory=lambda: load_cluster_config(None))
    restarts: int = 0  # controller restarts, evenly spread over the run
    downtime: float = 0.0  # how long each restart leaves the controller down
    return_share: float = 0.0  # share of lost hosts that come back (a partition, a hang)
    return_after: Dist = field(default_factory=lambda: Dist("fixed", 600.0))
    notices_per_hour: float = 0.0  # spot interruption notices per host-hour
    notice_lead: float = 120.0  # how long before the instance goes the notice comes
    # Who acts on a notice: the provisioner (a decommission with the lead as drain timeout),
    # the agent (the notice to the controller, notices.py), or nobody (loss detection only).
    notice_handling: str = "decommission"
    stuck_after: float = 3600.0  # a host in one state longer than this is reported


def load_scenario(path: Path) -> Scenario:
    try:
        doc = load_file(path)
    except SourceError as exc:
        raise ConfigError([str(exc)]) from None
    c = Checker(str(path))
    c.allowed_keys(
        doc,
        "",
        (
            "version",
            "cluster_config",
            "hosts",
            "duration",
            "seed",
            "template",
            "join_delay",
            "never_join",
            "spot_loss_per_hour",
            "reclaims",
            "jobs",
            "return_delay",
            "restarts",
            "returns_after_loss",
            "spot_notices",
            "stuck_after",
        ),
    )
    c.integer(doc, "version", "", required=True, minimum=1, maximum=1)
    cluster_path = c.string(doc, "cluster_config", "", required=False)
    hosts = c.integer(doc, "hosts", "", required=True, minimum=1, maximum=1_000_000)
    duration = c.duration(doc, "duration", "", default=86400.0, positive=True)
    seed = c.integer(doc, "seed", "", default=1)
    template = c.string(doc, "template", "", required=False, default="default")
    join_delay = _dist(doc, "join_delay", "", c, Dist("exponential", 60.0))
    never = c.number(doc, "never_join", "", default=0.0, minimum=0.0, maximum=1.0)
    spot = c.number(doc, "spot_loss_per_hour", "", default=0.0, minimum=0.0, maximum=1.0)
    rec = c.mapping(doc, "reclaims", "", required=False) or LineDict()
    if "reclaims" in doc:
        c.allowed_keys(rec, "reclaims", ("count", "start", "end", "drain_timeout", "policy"))
    count = c.integer(rec, "count", "reclaims", default=0, minimum=0)
    start = c.duration(rec, "start", "reclaims", default=0.0)
    end = c.duration(rec, "end", "reclaims", default=duration or 0.0)
    drain_timeout = c.duration(rec, "drain_timeout", "reclaims", default=600.0)
    policy = c.choice(rec, "policy", "reclaims", ("requeue", "kill", "wait"), default="requeue")
    jobs = c.mapping(doc, "jobs", "", required=False) or LineDict()
    if "jobs" in doc:
        c.allowed_keys(jobs, "jobs", ("per_host", "duration"))
    per_host = c.integer(jobs, "per_host", "jobs", default=1, minimum=0)
    job_duration = _dist(jobs, "duration", "jobs", c, Dist("exponential", 1800.0))
    return_delay = c.duration(doc, "return_delay", "", default=60.0)
    faults = _faults(doc, c)
    cluster = None
    try:
        cluster = load_cluster_config(Path(cluster_path) if cluster_path else None)
    except ConfigError as exc:
        c.problems.extend(exc.problems)
    values = (
        hosts,
        duration,
        seed,
        template,
        join_delay,
        never,
        spot,
        count,
        start,
        end,
        drain_timeout,
        policy,
        per_host,
        job_duration,
        return_delay,
        cluster,
        faults,
    )
    if c.problems or any(v is None for v in values):
        raise ConfigError(c.problems)
    assert cluster is not None and template is not None
    if template not in cluster.templates:
        raise ConfigError(
            [f"{path}: template: expected one of {', '.join(cluster.templates)}, got {template!r}"]
        )
    return Scenario(
        int(hosts or 0),
        float(duration or 0),
        int(seed or 0),
        template,
        join_delay or Dist(),
        float(never or 0),
        float(spot or 0),
        int(count or 0),
        (float(start or 0), float(end or 0)),
        float(drain_timeout or 0),
        str(policy),
        int(per_host or 0),
        job_duration or Dist(),
        float(return_delay or 0),
        cluster,
        **(faults or {}),
    )


HANDLINGS = ("decommission", "notice", "none")


def _faults(doc: LineDict, c: Checker) -> dict[str, Any] | None:
    """Controller restarts, hosts back after loss, spot notices, the stuck bound."""
    out: dict[str, Any] = {}
    for key, keys in (
        ("restarts", ("count", "downtime")),
        ("returns_after_loss", ("share", "after")),
        ("spot_notices", ("per_host_hour", "lead", "handling")),
    ):
        if key in doc:
            node = c.mapping(doc, key, "")
            if node is not None:
                c.allowed_keys(node, key, keys)
    restarts = c.mapping(doc, "restarts", "", required=False) or LineDict()
    back = c.mapping(doc, "returns_after_loss", "", required=False) or LineDict()
    notices = c.mapping(doc, "spot_notices", "", required=False) or LineDict()
    values = {
        "restarts": c.integer(restarts, "count", "restarts", default=0, minimum=0, maximum=1000),
        "downtime": c.duration(restarts, "downtime", "restarts", default=300.0),
        "return_share": c.number(
            back, "share", "returns_after_loss", default=0.0, minimum=0.0, maximum=1.0
        ),
        "return_after": _dist(back, "after", "returns_after_loss", c, Dist("fixed", 600.0)),
        "notices_per_hour": c.number(
            notices, "per_host_hour", "spot_notices", default=0.0, minimum=0.0, maximum=1.0
        ),
        "notice_lead": c.duration(notices, "lead", "spot_notices", default=120.0),
        "notice_handling": c.choice(
            notices, "handling", "spot_notices", HANDLINGS, default="decommission"
        ),
        "stuck_after": c.duration(doc, "stuck_after", "", default=3600.0, positive=True),
    }
    if any(v is None for v in values.values()):
        return None
    for key, value in values.items():
        keep = isinstance(value, (Dist, str))
        out[key] = value if keep else float(value)  # type: ignore[arg-type]
    out["restarts"] = int(out["restarts"])
    return out


def _dist(node: LineDict, key: str, path: str, c: Checker, default: Dist) -> Dist | None:
    if key not in node:
        return default
    d = c.mapping(node, key, path)
    if d is None:
        return None
    p = f"{path}.{key}" if path else key
    c.allowed_keys(d, p, ("distribution", "mean", "min", "max", "sd"))
    kind = c.choice(d, "distribution", p, DISTRIBUTIONS, default="fixed")
    mean = c.duration(d, "mean", p, default=0.0)
    low = c.duration(d, "min", p, default=0.0)
    high = c.duration(d, "max", p, default=low or 0.0)
    sd = c.duration(d, "sd", p, default=(mean or 0.0) / 2)
    if None in (kind, mean, low, high, sd):
        return None
    return Dist(str(kind), float(mean or 0), float(low or 0), float(high or 0), float(sd or 0))
