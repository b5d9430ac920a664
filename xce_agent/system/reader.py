"""Who may read the files handed to the worker-role components: the user they run as."""

from __future__ import annotations

import logging
import pwd
from collections.abc import Iterable
from dataclasses import dataclass

from xce_agent.supervision.spec import ComponentSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reader:
    """Who must be able to read the handoff files: a uid and gid, or root (None)."""

    uid: int | None = None
    gid: int | None = None


def reader_of(specs: Iterable[ComponentSpec]) -> Reader:
    """The user the worker-role components run as (the first one that names a user)."""
    users = {spec.user for spec in specs if spec.user is not None}
    if not users:
        return Reader()
    first = sorted(users)[0]
    if len(users) > 1:
        log.error(
            "worker-role components run as several users (%s): only %s can read the template",
            ", ".join(sorted(users)),
            first,
        )
    try:
        entry = pwd.getpwuid(int(first)) if first.isdigit() else pwd.getpwnam(first)
    except (KeyError, ValueError):
        return Reader()  # the spawn fails and says so
    return Reader(entry.pw_uid, entry.pw_gid)
