"""Per-component limits enforced by systemd: each limited component in a transient scope unit.

Enabling controllers in the agent's delegated cgroup would enforce limits there, but cgroup
v2 then forbids processes in the unit's own cgroup, and systemd before 254 (no
`DelegateSubgroup=`; Debian 12 has 252) puts every new agent there: a crashed agent could
never be started again. So a component with `limits:` is started as

    systemd-run --scope --unit=xce-TAG-NAME.scope --slice=xce.slice -p MemoryMax=... -- CMD

systemd-run creates the scope with itself in it and then execs CMD in place: the process
stays the agent's child (same pid, start time, pidfd, exit status), while systemd, which owns
`xce.slice`, enables the controllers and writes memory.max, cpu.weight and pids.max. The
scope's cgroup is derived from the slice and the unit name alone, never read from the state.
TAG is a digest of the state directory, so two agents on one host never share a scope.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from xce_agent.supervision.spec import ComponentSpec, ResourceLimits

SLICE = "xce.slice"
TRANSIENT = Path("/run/systemd/transient")  # a transient unit's file: there while it is loaded
_CONTROLLERS = {"memory_max": "memory", "cpu_weight": "cpu", "tasks_max": "pids"}
_PROPERTIES = {"memory_max": "MemoryMax", "cpu_weight": "CPUWeight", "tasks_max": "TasksMax"}


def tag_of(state_directory: Path) -> str:
    return hashlib.sha256(str(state_directory).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Scopes:
    """Where scoped components live, and how to start one; `mount` is the cgroup2 mount."""

    mount: Path
    tag: str
    agent_unit: str = ""  # the agent's own unit, which stops before the scopes at shutdown
    systemd_run: str = "systemd-run"
    setpriv: str = ""  # switches user and groups after the scope exists; "" if not installed
    version: int = 252  # systemd's: scopes take OOMPolicy= from 252 on (checked on Debian 12)
    # False where no scope can be started now (systemd-run gone, say): the scopes an earlier
    # agent started are still the components' cgroups, for adoption, leftovers and stops.
    starts: bool = True

    @property
    def slice_dir(self) -> Path:
        return self.mount / SLICE

    def unit(self, name: str) -> str:
        return f"xce-{self.tag}-{name}.scope"

    def cgroup(self, name: str) -> Path:
        return self.slice_dir / self.unit(name)

    def names(self) -> list[str]:
        """Components that have a scope of this agent now."""
        prefix, suffix = f"xce-{self.tag}-", ".scope"
        try:
            entries = sorted(os.listdir(self.slice_dir))
        except OSError:
            return []
        return [
            e[len(prefix) : -len(suffix)]
            for e in entries
            if e.startswith(prefix) and e.endswith(suffix)
        ]

    def loaded(self, name: str) -> bool:
        """systemd still knows the scope (it lingers a few ms after its cgroup emptied; a
        start under the same name fails until it is gone)."""
        return (TRANSIENT / self.unit(name)).exists()

    def started_with(self, name: str) -> ResourceLimits | None:
        """The limits the running scope was created with, from systemd's own unit file."""
        try:
            text = (TRANSIENT / self.unit(name)).read_text()
        except OSError:
            return None
        found: dict[str, int] = {}
        for key, prop in _PROPERTIES.items():
            match = re.search(rf"^{prop}=(\d+)$", text, re.M)
            if match:
                found[key] = int(match.group(1))
        return ResourceLimits(**found)

    def unenforced(self, limits: ResourceLimits) -> list[str]:
        """The limits set that the hierarchy cannot enforce (controller not available)."""
        return unenforced(limits, self.mount)

    def command(
        self, spec: ComponentSpec, uid: int | None, gid: int | None, groups: list[int] | None
    ) -> list[str]:
        """The argv that runs `spec` in its scope, as its user once the scope exists."""
        argv = [
            self.systemd_run,
            "--scope",
            "--quiet",
            "--collect",
            f"--unit={self.unit(spec.name)}",
            f"--slice={SLICE}",
            f"--description=xce-agent component {spec.name}",
            # Should systemd ever stop the scope itself: the component's own stop settings.
            "-p",
            f"KillSignal={signal.Signals(spec.stop_signal).name}",
            "-p",
            f"TimeoutStopSec={max(1, round(spec.stop_timeout))}s",
        ]
        if self.version >= 252:
            # The agent decides whether an OOM kill ends the component (its restart policy);
            # an older systemd would refuse the unknown property and the start.
            argv += ["-p", "OOMPolicy=continue"]
        if self.agent_unit:
            # Stop order is the reverse of start order: at shutdown the agent stops first and
            # stops the components itself, gracefully; systemd's stop of the scope comes after.
            argv += ["-p", f"Before={self.agent_unit}"]
        for key, prop in _PROPERTIES.items():
            value = getattr(spec.limits, key)
            if value is not None:
                argv += ["-p", f"{prop}={value}"]
        argv.append("--")
        if uid is not None or gid is not None:
            argv += self._switch(uid, gid, groups)
        return [*argv, *spec.command]

    def _switch(self, uid: int | None, gid: int | None, groups: list[int] | None) -> list[str]:
        # systemd-run's own --uid sets no supplementary groups (252): setpriv does it all.
        words = [self.setpriv]
        if uid is not None:
            words.append(f"--reuid={uid}")
        if gid is not None:
            words.append(f"--regid={gid}")
        if groups is not None:
            words.append(
                f"--groups={','.join(str(g) for g in groups)}" if groups else "--clear-groups"
            )
        elif gid is not None:
            words.append("--keep-groups")
        return [*words, "--"]


def unenforced(limits: ResourceLimits, cgroup: Path) -> list[str]:
    """The limits set whose controller `cgroup` does not offer to its children."""
    try:
        have = (cgroup / "cgroup.controllers").read_text().split()
    except OSError:
        have = []
    wanted = [key for key in _CONTROLLERS if getattr(limits, key) is not None]
    return [key for key in wanted if _CONTROLLERS[key] not in have]


def detect(mount: Path, state_directory: Path, agent_unit: str) -> tuple[Scopes | None, str]:
    """Scopes to start components in when systemd runs this host and started the agent;
    else why not, with the scopes an earlier agent left (known, never started)."""
    run = shutil.which("systemd-run")
    why = ""
    if not Path("/run/systemd/system").is_dir():
        why = "systemd is not the init system"
    elif not agent_unit or "INVOCATION_ID" not in os.environ:
        why = "the agent was not started by systemd"
    elif run is None:
        why = "systemd-run is not installed"
    if why or run is None:
        return for_cleanup(mount, state_directory), why
    scopes = Scopes(
        mount,
        tag_of(state_directory),
        agent_unit,
        run,
        shutil.which("setpriv") or "",
        _version(run),
    )
    return scopes, ""


def _version(run: str) -> int:
    """systemd's version, from `systemd-run --version` ("systemd 252 (252.39-1~deb12u2)")."""
    try:
        out = subprocess.run(
            [run, "--version"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    match = re.match(r"systemd (\d+)", out)
    return int(match.group(1)) if match else 0


def for_cleanup(mount: Path | None, state_directory: Path) -> Scopes | None:
    """The scopes an agent of `state_directory` may have left (for `xce-agent stop`, and an
    agent that cannot start scopes any more): known as the components' cgroups, never started."""
    if mount is None or not (mount / SLICE).is_dir():
        return None
    return Scopes(mount, tag_of(state_directory), starts=False)
