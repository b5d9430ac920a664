"""The fencing property of a lease, checked on the stored fact log.

A write made under a lease (`?lease=NAME&token=T`) may be stored only while T is the lease's
current grant: in the log's order, after the fact that granted T and before any later grant or
any release of T. Renewals are not facts, so an expiry is not visible here; the order of grants
and writes is (an old holder's write stored after a takeover is the counterexample fencing
exists to rule out). The writes carry their token in what they write (`write_id`), so the log
alone says under which grant each was made. Besides: every write the controller acknowledged is
stored exactly once, and none it refused as stale is stored at all.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from xce_controller.core.model import Fact

GRANTED, RELEASED = "lease_granted", "lease_released"
WRITE = re.compile(r"^f(?P<token>[0-9]+)-(?P<actor>[a-z0-9]+)-(?P<n>[0-9]+)$")


def write_id(token: int, actor: str, n: int) -> str:
    """The instance id of the `n`th write of `actor`, made under grant `token`."""
    return f"f{token}-{actor}-{n}"


@dataclass(frozen=True)
class Outcome:
    """What the writer was answered: "stored" (2xx), "stale" (409 stale_lease), or
    "unknown" (a timeout, a connection lost, a 5xx: stored or not, both are allowed)."""

    write: str
    said: str


def problems(log: Iterable[Fact], lease: str, outcomes: Iterable[Outcome]) -> list[str]:
    """Every violation, one line each; [] when the log keeps the fence."""
    found: list[str] = []
    current = 0  # the live grant's token, 0 while none is
    stored: Counter[str] = Counter()
    for seq, fact in enumerate(log, 1):
        if fact.data.get("lease") == lease and fact.kind == GRANTED:
            current = int(fact.data["token"])
        elif fact.data.get("lease") == lease and fact.kind == RELEASED:
            if int(fact.data["token"]) == current:
                current = 0
        elif fact.kind == "expected":
            match = WRITE.match(str(fact.data.get("instance_id", "")))
            if match is None:
                continue
            stored[match.group(0)] += 1
            token = int(match.group("token"))
            if token != current:
                found.append(
                    f"fact {seq}: {match.group(0)} stored under token {token} while the "
                    f"current grant is {current or 'none'}"
                )
    found += _answers(stored, {o.write: o.said for o in outcomes})
    return found


def _answers(stored: Mapping[str, int], said: Mapping[str, str]) -> list[str]:
    found = []
    for write, answer in sorted(said.items()):
        count = stored.get(write, 0)
        if answer == "stored" and count != 1:
            found.append(f"{write}: acknowledged, stored {count} times")
        elif answer == "stale" and count:
            found.append(f"{write}: refused as stale, stored {count} times")
        elif answer == "unknown" and count > 1:
            found.append(f"{write}: stored {count} times")
    found += [
        f"{w}: stored {n} times, never sent" for w, n in sorted(stored.items()) if w not in said
    ]
    return found
