"""What the never-two tests and checker do to a host: cgroups they own, a state directory
made read-only or full, and an atomic count of a component's live copies.

Copies are counted from cgroup.procs (one read of the kernel's list), never by a scan of
/proc: every agent of a test, and so everything it starts, runs inside a cgroup the test
made (`Sandbox`), whether the agent is told to contain its components there or not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from xce_agent.supervision.cgroups import cgroup2_mount


def usable_root() -> Path | None:
    """The cgroup2 mount, when this process may make cgroups in it (root)."""
    mount = cgroup2_mount()
    if mount is None or os.geteuid() != 0 or not os.access(mount, os.W_OK):
        return None
    return mount


def can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


def remove_tree(path: Path) -> None:
    """Kill everything in `path` and its children, then remove them (deepest first)."""
    if not path.exists():
        return
    children = sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
    for cgroup in [*children, path]:
        with contextlib.suppress(OSError):
            (cgroup / "cgroup.kill").write_text("1")
    deadline = time.monotonic() + 10
    while procs_below(path) and time.monotonic() < deadline:
        time.sleep(0.01)  # the killed are on their way out; a populated cgroup stays
    # A cgroup whose last process just left may refuse its removal (EBUSY) for a moment.
    for cgroup in [*children, path]:
        while cgroup.exists() and time.monotonic() < deadline:
            try:
                cgroup.rmdir()
            except OSError:
                time.sleep(0.01)


def procs(cgroup: Path) -> list[int]:
    """The processes of `cgroup` alone (one read of cgroup.procs); [] if it is gone."""
    try:
        return [int(x) for x in (cgroup / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def procs_below(cgroup: Path) -> list[int]:
    """The processes of `cgroup` and every cgroup under it (each cgroup.procs read once)."""
    found: list[int] = []
    for top, dirs, _ in os.walk(cgroup):
        found += procs(Path(top))
        dirs[:] = [d for d in dirs if d not in ("cgroup.procs",)]
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def copies(cgroup: Path, marker: str) -> list[int]:
    """Live processes under `cgroup` whose command line holds `marker` (a component's script
    path). Zombies count as gone: their command line is empty."""
    return [pid for pid in procs_below(cgroup) if marker in cmdline(pid)]


def mount_read_only(directory: Path) -> None:
    """Make `directory` read-only in place (a read-only bind mount over itself).

    The remount fails (EBUSY) while a file is open for writing through the new bind mount
    (the agent saving its state just then): it is tried again, up to a bound."""
    subprocess.run(["mount", "--bind", str(directory), str(directory)], check=True)
    ro = ["mount", "-o", "remount,bind,ro", str(directory)]
    for _ in range(200):
        if subprocess.run(ro, capture_output=True).returncode == 0:
            return
        time.sleep(0.01)
    subprocess.run(ro, check=True)


def mount_small(directory: Path, size: str = "2m") -> None:
    """A small tmpfs on `directory` (made empty), which `fill` can fill."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(directory)],
        check=True,
    )


def fill(directory: Path) -> Path:
    """Fill the file system of `directory` to the last byte; the filler's path."""
    filler = directory / "join.json.filler"  # a name the agent's directory check accepts
    with contextlib.suppress(OSError), open(filler, "wb") as handle:
        while True:
            handle.write(b"\0" * 65536)
            handle.flush()
    with contextlib.suppress(OSError), open(filler, "ab") as handle:
        while True:
            handle.write(b"\0")
            handle.flush()
    return filler


def unmount(directory: Path, layers: int = 1) -> None:
    """Undo the top `layers` mounts on `directory` (a bind mount and its remount are one)."""
    for _ in range(layers):
        # Lazy: a process with a file open under it (a copy the agent started) keeps the
        # old mount alive for itself only; the directory is the writable one again at once.
        if subprocess.run(["umount", "-l", str(directory)], capture_output=True).returncode:
            return


def enter(cgroup: Path, pid: int) -> None:
    (cgroup / "cgroup.procs").write_text(f"{pid}\n")
