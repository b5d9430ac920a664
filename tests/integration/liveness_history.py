"""The liveness checker's judge: given what each simulated host saw of its heartbeats and
which hosts the controllers declared lost, name every breach of the failover contract
(docs/ha.md, "The failover contract"), whatever the faults were.

- **A host that kept trying is never declared lost.** Kill, pause or cut off any replicas,
  stop the database for longer than the grace: a host that went on sending its heartbeats
  (moving to the next replica on no answer or a 503) is never `lost`. The contract's three
  rules are what make this hold: a replica's loss sends the host to the next replica; a
  replica cut off hands its hosts on; a replica that could not hear (stopped, or its
  database away) gives every host a fresh grace.
- **A host declared lost had gone silent.** A host that stopped sending is declared lost no
  earlier than one grace, less the time a heartbeat takes to be shared between replicas
  (`slack`), after the last heartbeat a replica acknowledged.
- **And it is declared lost**: every silenced host is `lost` by the end (so the checker can
  see a loss at all).

Times are wall times of this machine: the hosts' clock and the replicas' (the database's)
are the same clock here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Loss:
    """A `lost` state fact: the host's name, when it was decided, and its `why`."""

    host: str
    at: float
    why: str


@dataclass(frozen=True)
class Beats:
    """What one host saw: the send times of heartbeats a replica answered 200, and when it
    stopped sending (None: it never did)."""

    acked: Sequence[float]
    silenced_at: float | None = None


def violations(
    hosts: Mapping[str, Beats], losses: Iterable[Loss], grace: float, slack: float
) -> list[str]:
    """Every breach, one line each (empty: the history keeps the contract)."""
    found: list[str] = []
    lost: dict[str, list[Loss]] = {}
    for loss in losses:
        lost.setdefault(loss.host, []).append(loss)
    for name, beats in sorted(hosts.items()):
        mine = lost.get(name, [])
        if beats.silenced_at is None:
            found += [
                f"{name} kept sending heartbeats and was declared lost at {x.at:.1f} ({x.why})"
                for x in mine
            ]
            continue
        if not mine:
            found.append(
                f"{name} went silent at {beats.silenced_at:.1f} and was never declared lost"
            )
        for loss in mine:
            heard = [a for a in beats.acked if a <= loss.at]
            last = max(heard, default=None)
            if last is not None and loss.at - last < grace - slack:
                found.append(
                    f"{name} declared lost at {loss.at:.1f} ({loss.why}), "
                    f"{loss.at - last:.1f}s after a heartbeat was acknowledged "
                    f"(grace {grace:g}s less {slack:g}s)"
                )
    found += [
        f"{name} declared lost at {mine[0].at:.1f} is no host of the run"
        for name, mine in sorted(lost.items())
        if name not in hosts
    ]
    return found
