"""Checking a store's recorded history after a failure test: that it could have come from
one controller deciding one request at a time (a linearizable history of each host).

- Each host's facts form a path of the host state machine drawn in docs/controller.md (the
  diagram is the specification read here, so the code and the drawing cannot drift apart).
- Each job's facts form a path of the job states (submitted once, placed only while pending,
  requeued or finished only while placed).
- Each decision is recorded once: an instance expected once per life, one drain per life,
  one decommission per life, one requeue per placement of a job.
- Every operation a client saw acknowledged is in the log exactly once.

`problems(facts)` gives each violation as one line; [] is a clean history.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from xce_controller.core.model import Fact

DIAGRAM = Path(__file__).resolve().parents[2] / "docs" / "controller.md"
START = "[*]"
EDGE = re.compile(r"^\s+(\S+) --> (\w+)")


def host_edges(doc: Path = DIAGRAM) -> set[tuple[str, str]]:
    """The (from, to) pairs of the host state diagram; START for a host not yet recorded."""
    text = doc.read_text()
    block = text.split("stateDiagram-v2", 1)[1].split("```", 1)[0]
    return {(m.group(1), m.group(2)) for m in map(EDGE.match, block.splitlines()) if m}


JOB_EDGES = {
    ("pending", "assigned"),
    ("assigned", "running"),
    ("assigned", "pending"),  # requeued
    ("running", "pending"),
    ("assigned", "done"),  # a finish may come without its start (the report was lost)
    ("assigned", "failed"),
    ("running", "done"),
    ("running", "failed"),
    ("assigned", "killed"),
    ("running", "killed"),
    ("pending", "killed"),  # cancelled before it was placed
}


def _host_move(fact: Fact) -> tuple[str, str] | None:
    """(host key, the state the fact puts it in), for facts that move a host."""
    d = fact.data
    if fact.kind == "expected":
        return str(d["instance_id"]), "expected"
    if fact.kind == "joined":
        return str(d["key"]), str(d.get("state", "open"))
    if fact.kind == "state":
        return str(d["key"]), str(d["state"])
    if fact.kind == "drain":
        return str(d["key"]), "draining"
    return None


def _job_move(fact: Fact) -> tuple[int, str] | None:
    d = fact.data
    if not fact.kind.startswith("job_") or fact.kind in ("job_submitted", "job_waiting"):
        return None
    if fact.kind == "job_finished":
        return int(d["id"]), "done" if d["exit_code"] == 0 else "failed"
    to = {"job_assigned": "assigned", "job_started": "running", "job_requeued": "pending"}
    return int(d["id"]), to.get(fact.kind, "killed")


def problems(facts: Iterable[Fact], edges: set[tuple[str, str]] | None = None) -> list[str]:
    allowed = host_edges() if edges is None else edges
    hosts: dict[str, str] = {}
    lives: Counter[str] = Counter()  # a host's `expected` facts: a returned one lives again
    decided: Counter[tuple[Any, ...]] = Counter()
    jobs: dict[int, str] = {}
    placements: Counter[int] = Counter()
    found: list[str] = []
    for seq, fact in enumerate(facts, 1):
        moved = _host_move(fact)
        if moved is not None:
            key, to = moved
            was = hosts.get(key, START)
            if (was, to) not in allowed:
                found.append(f"fact {seq}: host {key} {was} -> {to} is no transition: {fact}")
            hosts[key] = to
            if fact.kind == "expected":
                lives[key] += 1
            if fact.kind in ("expected", "drain") or to == "decommissioned":
                decided[(key, lives[key], fact.kind, to)] += 1
        if fact.kind == "job_submitted":
            job = int(fact.data["id"])
            if job in jobs:
                found.append(f"fact {seq}: job {job} submitted twice")
            jobs[job] = "pending"
        job_moved = _job_move(fact)
        if job_moved is not None:
            job, to = job_moved
            was = jobs.get(job, START)
            if (was, to) not in JOB_EDGES:
                found.append(f"fact {seq}: job {job} {was} -> {to} is no transition: {fact}")
            jobs[job] = to
            if fact.kind == "job_assigned":
                placements[job] += 1
            if fact.kind == "job_requeued":
                decided[(job, placements[job], "job_requeued")] += 1
    found += [f"decided {n} times: {key}" for key, n in decided.items() if n > 1]
    return found


def acknowledged(
    facts: Iterable[Fact], acked: Iterable[str], match: Callable[[Fact], str | None]
) -> list[str]:
    """Each acknowledged operation (named as `match(fact)` names the fact that records it)
    present exactly once."""
    counts = Counter(name for name in map(match, facts) if name is not None)
    return [f"acknowledged {a} recorded {counts[a]} times" for a in acked if counts[a] != 1]


def expected_instance(fact: Fact) -> str | None:
    """A `POST /v1/expected` names its instance id."""
    return str(fact.data["instance_id"]) if fact.kind == "expected" else None
