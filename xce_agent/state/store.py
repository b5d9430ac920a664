"""`StateStore`: reads and atomically replaces `state.json` in the agent's own directory.

A corrupt file is moved aside, never trusted or fatal; a directory that holds what the agent
never writes is refused (it is shared, and the agent would close it to others).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from pathlib import Path

from xce_agent.errors import StateError, StateNotPermitted
from xce_agent.state.model import AgentState
from xce_protocol.atomic_file import write_atomic

log = logging.getLogger("xce_agent.state")  # the name these lines had in the journal

STATE_FILE = "state.json"
# What the agent (or an earlier version) keeps in its state directory; anything else means
# the directory is shared (state_directory: /var/lib, /tmp, /), which the agent must not close.
_OWN_NAMES = frozenset(
    (
        *("state.json", "template.json", "output", "control.sock", "credential", "agent.lock"),
        "credential.json",  # credential.py: the host and worker credentials of the last join
    )
)
_OWN_PREFIXES = (
    *(".state.json.", ".template.json.", "state.json.corrupt-", ".credential."),
    *("notice-", ".notice-"),  # notices/relay.py: notice-NAME.json and its temporary files
    *("join.json", ".join.json."),  # join_deadline.py: the join deadline's record
)


def _ours(name: str) -> bool:
    return name in _OWN_NAMES or name.startswith(_OWN_PREFIXES) or name == "lost+found"


class StateStore:
    """Reads and atomically replaces `state.json` in one directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / STATE_FILE
        self._stamp: tuple[int, int, int] | None = None  # the file this store wrote last
        self._lock = threading.Lock()  # a write and its stamp are one step for changed_under

    def ensure_directory(self) -> None:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            msg = f"{self.directory}: cannot create state directory: {exc.strerror}"
            raise StateError(msg) from None
        foreign = sorted(name for name in os.listdir(self.directory) if not _ours(name))
        if foreign:
            # The agent takes the directory's owner and mode (0700 root): never a shared one.
            shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
            raise StateError(
                f"{self.directory}: not a state directory of the agent's own (it holds {shown});"
                " point state_directory at a directory for the agent alone"
            )

    def clean_temp_files(self) -> int:
        """Remove `.state.json.*` left by a writer that died mid-write; how many."""
        removed = 0
        try:
            names = os.listdir(self.directory)
        except OSError:
            return 0
        for name in names:
            if name.startswith(f".{STATE_FILE}."):
                with contextlib.suppress(OSError):
                    os.unlink(self.directory / name)
                    removed += 1
        return removed

    def load(self) -> AgentState | None:
        """The saved state; None if there is none or it was corrupt (then moved aside)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StateError(f"{self.path}: cannot read: {exc.strerror}") from None
        try:
            return AgentState.from_json(json.loads(raw.decode("utf-8")))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # deep: not ours
            aside = self.path.with_name(f"{STATE_FILE}.corrupt-{int(time.time())}")
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
            log.error("%s: corrupt state moved aside to %s (%s)", self.path, aside.name, exc)
            return None

    def read_only(self) -> AgentState | None:
        """Like load, but never moves a file (for `status`, which may not own the state)."""
        try:
            return AgentState.from_json(json.loads(self.path.read_bytes().decode("utf-8")))
        except FileNotFoundError:
            return None
        except PermissionError as exc:  # `status` says it needs root, when not root
            raise StateNotPermitted(f"{self.path}: unreadable state: {exc.strerror}") from None
        except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise StateError(f"{self.path}: unreadable state: {exc}") from None

    def save(self, state: AgentState) -> None:
        with self._lock:
            write_atomic(self.path, json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n")
            with contextlib.suppress(OSError):
                self._stamp = _stamp(os.stat(self.path))

    def changed_under(self) -> str:
        """Why the file is no longer the one this store wrote last ("" while it is): removed,
        edited or replaced (an older copy put back). The agent writes its state again then,
        since the next agent adopts only what the file names."""
        if not self._lock.acquire(blocking=False):
            return ""  # a write is under way (the event loop never waits on its fsync)
        try:
            if self._stamp is None:
                return ""
            now = _stamp(os.stat(self.path))
        except FileNotFoundError:
            return "removed"
        except OSError:
            return ""
        finally:
            self._lock.release()
        return "" if now == self._stamp else "edited or replaced"


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)
