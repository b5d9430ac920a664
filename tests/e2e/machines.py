"""Boot hosts under real systemd with systemd-nspawn, from a cached debootstrap rootfs."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

PACKAGES = (
    "systemd,systemd-sysv,dbus,python3,cloud-init,python3-click,python3-yaml,python3-psutil,"
    "python3-requests,python3-sdnotify,python3-cffi-backend,procps"
)
# What the controller's host adds from Debian's archive (FastAPI 0.92, pydantic 1.10, ...).
CONTROLLER_PACKAGES = (
    "python3-fastapi",
    "python3-pydantic",
    "python3-uvicorn",
    "python3-prometheus-client",
    "python3-httptools",
    "python3-uvloop",
    "python3-pytest",  # to run the controller's tests on these versions
    "python3-httpx",  # the authorization matrix calls the app in process (ASGITransport)
    # The PostgreSQL store on Debian 12's psycopg 3.1, against Debian's server.
    "python3-psycopg",
    "python3-psycopg-pool",
    "postgresql",
)
CLOUD_CFG = """\
datasource_list: [NoCloud, None]
network: {config: disabled}
locale: C.UTF-8
"""


def cache_tarball(name: str = "bookworm-rootfs") -> Path:
    """Where a rootfs is cached, outside the repository."""
    base = os.environ.get("XCE_E2E_CACHE") or os.path.expanduser("~/.cache/xce-agent-e2e")
    return Path(base) / f"{name}.tar.zst"


def debian_mirror() -> str:
    """The mirror this machine's apt uses (debootstrap must use the same one)."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    listing = Path("/etc/apt/sources.list")
    if listing.exists():
        match = re.search(r"^deb\s+(\S+)\s+bookworm\s", listing.read_text(), re.M)
        if match:
            return match.group(1)
    raise RuntimeError("no Debian mirror found in apt's sources")


def ensure_rootfs_cache(
    suite: str = "bookworm", packages: str = PACKAGES, name: str = "bookworm-rootfs"
) -> Path:
    tarball = cache_tarball(name)
    if tarball.exists():
        return tarball
    tarball.parent.mkdir(parents=True, exist_ok=True)
    build = tarball.parent / f"{name}.build"
    shutil.rmtree(build, ignore_errors=True)
    debootstrap = ["debootstrap", "--variant=minbase", f"--include={packages}", suite]
    subprocess.run([*debootstrap, str(build), debian_mirror()], check=True, capture_output=True)
    _pack(build, tarball)
    return tarball


def ensure_controller_cache() -> Path:
    """The bookworm rootfs plus the controller's dependencies from Debian's archive."""
    # Named by its package list, so a changed list builds a new cache.
    digest = hashlib.sha256(" ".join(CONTROLLER_PACKAGES).encode()).hexdigest()[:8]
    tarball = cache_tarball(f"bookworm-controller-{digest}")
    if tarball.exists():
        return tarball
    build = tarball.with_suffix(".build")
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir(parents=True)
    subprocess.run(
        ["tar", "-C", str(build), "--zstd", "-xf", str(ensure_rootfs_cache())], check=True
    )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # No service starts inside the chroot (postgresql's would outlive it), and no default
    # cluster: the tests make their own servers.
    policy = build / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    createcluster = build / "etc/postgresql-common/createcluster.conf"
    createcluster.parent.mkdir(parents=True, exist_ok=True)
    createcluster.write_text("create_main_cluster = false\n")
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *CONTROLLER_PACKAGES],
        ["apt-get", "clean"],
    ):
        subprocess.run(["chroot", str(build), *command], check=True, capture_output=True, env=env)
    policy.unlink()
    _pack(build, tarball)
    return tarball


def _pack(build: Path, tarball: Path) -> None:
    tmp = tarball.with_suffix(".tmp")
    subprocess.run(["tar", "-C", str(build), "--zstd", "-cf", str(tmp), "."], check=True)
    tmp.rename(tarball)
    shutil.rmtree(build, ignore_errors=True)


def build_debs(out: Path, root: Path | None = None) -> dict[str, Path]:
    """Build the .debs of a tree (this one by default); their paths by package name."""
    root = root or Path(__file__).resolve().parents[2]
    built = subprocess.run(
        [str(root / "packaging/build-deb.sh"), str(out)], capture_output=True, text=True, check=True
    )
    debs = [Path(line) for line in built.stdout.split()]
    return {deb.name.split("_", 1)[0]: deb for deb in debs}


def nspawn_command(root: Path, *args: str, binds: tuple[str, ...] = ()) -> list[str]:
    """A command in `root` without booting it: this tree at /src (read-only, on PYTHONPATH)
    and the host's network, so a server on the host's loopback is reachable."""
    src = Path(__file__).resolve().parents[2]
    return [
        "systemd-nspawn",
        "-q",
        "-D",
        str(root),
        "--register=no",
        "--keep-unit",
        "--as-pid2",
        f"--bind-ro={src}:/src",
        *[f"--bind={b}" for b in binds],
        "--chdir=/src",
        "-E",
        "PYTHONDONTWRITEBYTECODE=1",
        "-E",
        "PYTHONPATH=/src",
        *args,
    ]


def prepare_base(tarball: Path, base: Path, *debs: Path) -> None:
    """Unpack the rootfs, install the packages and cloud-init's NoCloud settings."""
    base.mkdir(parents=True)
    subprocess.run(["tar", "-C", str(base), "--zstd", "-xf", str(tarball)], check=True)
    for deb in debs:
        shutil.copy(deb, base / "tmp" / deb.name)
    subprocess.run(
        ["chroot", str(base), "dpkg", "-i", *[f"/tmp/{deb.name}" for deb in debs]],
        check=True,
        capture_output=True,
    )
    (base / "etc/cloud/cloud.cfg.d/90-xce-e2e.cfg").write_text(CLOUD_CFG)
    # A unique machine id per boot comes from the overlay; keep the base's empty.
    (base / "etc/machine-id").write_text("")


def _cgroup2_mount() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            return Path(left.split()[4])
    return None


def own_cgroup(name: str) -> Path | None:
    """A fresh cgroup v2 directory beside ours, or None where we cannot make one."""
    mount = _cgroup2_mount()
    if mount is None:
        return None
    own = next(
        (
            line[3:]
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line[:3] == "0::"
        ),
        "/",
    )
    path = mount / own.strip("/") / name if own.strip("/") else mount / name
    try:
        path.mkdir()
    except OSError:
        return None
    return path


def remove_cgroup(path: Path) -> None:
    """Kill what is left in `path` and remove it with its children, deepest first."""
    dirs = sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
    for directory in [*dirs, path]:
        with contextlib.suppress(OSError):
            (directory / "cgroup.kill").write_text("1")
    deadline = time.monotonic() + 10
    for directory in [*dirs, path]:
        while time.monotonic() < deadline:
            try:
                directory.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)


def files_user_data(files: dict[str, str]) -> str:
    """Cloud-init user-data that writes `files` (path -> text) and enables the agent (after a
    daemon-reload when one of them is a systemd drop-in)."""
    parts = ["#cloud-config", "write_files:"]
    for path, text in files.items():
        parts.append(f"- path: {path}\n  content: |")
        parts.extend(f"    {line}" for line in text.splitlines())
    parts.append("runcmd:")
    if any(path.startswith("/etc/systemd/") for path in files):
        parts.append("- [systemctl, daemon-reload]")
    parts.append("- [systemctl, enable, --now, xce-agent.service]")
    return "\n".join(parts) + "\n"


def chroot(base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["chroot", str(base), *args], capture_output=True, text=True, check=False)


class Machine:
    """One nspawn container with its own NoCloud seed and a kept state directory."""

    def __init__(
        self,
        base: Path,
        workdir: Path,
        name: str,
        instance: str,
        user_data: str,
        extra_binds: tuple[str, ...] = (),
        unified_cgroups: bool = False,
        state_dir: str | None = "/var/lib/xce-agent",
    ) -> None:
        self.base = base
        self.name = name
        self.instance = instance
        self.dir = workdir / name
        self.seed = self.dir / "seed"
        self.state = self.dir / "state"
        self.seed.mkdir(parents=True)
        self.state.mkdir(mode=0o700)
        (self.seed / "meta-data").write_text(f"instance-id: {instance}\nlocal-hostname: {name}\n")
        (self.seed / "user-data").write_text(user_data)
        self.binds = extra_binds
        # A pure cgroup v2 hierarchy, as Debian 12 and RHEL 9 hosts have (see the cgroups
        # notes: this machine's own layout is hybrid).
        self.unified_cgroups = unified_cgroups
        # Bound from the host so it survives reboots; None keeps it in the volatile overlay,
        # where a package's purge can delete it (a bind mount point cannot be removed).
        self.state_dir = state_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.cgroup: Path | None = None
        self.leader = 0
        self.boots = 0

    def boot(self) -> None:
        self.boots += 1
        log = open(self.dir / f"console-{self.boots}.log", "wb")  # noqa: SIM115
        args = [
            "systemd-nspawn",
            "-q",
            "-D",
            str(self.base),
            "--volatile=overlay",
            f"--bind-ro={self.seed}:/var/lib/cloud/seed/nocloud",
            "--boot",
            "--register=no",
            "--keep-unit",
            f"--machine=xce-e2e-{self.name}-{os.getpid()}-{self.boots}",
            f"--hostname={self.name}",
        ]
        if self.state_dir:
            args.append(f"--bind={self.state}:{self.state_dir}")
        args += [f"--bind-ro={b}" for b in self.binds]
        # Each container in a cgroup v2 directory of its own: with --keep-unit they would
        # otherwise all build their system.slice in the same cgroup, and two agents would
        # share one delegated xce-agent.service cgroup (no real host has that).
        self.cgroup = own_cgroup(f"xce-e2e-{self.name}-{os.getpid()}-{self.boots}")
        if self.cgroup is not None:
            enter = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
            args = ["/bin/sh", "-c", enter, str(self.cgroup), *args]
        env = dict(os.environ)
        if self.unified_cgroups:
            env["SYSTEMD_NSPAWN_UNIFIED_HIERARCHY"] = "1"
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        log.close()
        self.leader = self._find_leader()
        self.wait_for(
            lambda: (
                self.run("systemctl", "is-system-running").stdout.strip() in ("running", "degraded")
            ),
            60,
            "boot to multi-user",
        )

    def _find_leader(self, timeout: float = 30) -> int:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for child in Path(f"/proc/{self.proc.pid}/task").glob("*/children"):
                for pid in child.read_text().split():
                    status = Path(f"/proc/{pid}/status").read_text()
                    if re.search(r"^NSpid:\s+\d+\s+1$", status, re.M):
                        return int(pid)
            time.sleep(0.1)
        raise RuntimeError(f"{self.name}: container did not start")

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["nsenter", "-t", str(self.leader), "-a", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def wait_for(self, check: object, timeout: float, what: str) -> None:
        assert callable(check)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except (OSError, subprocess.SubprocessError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: {what} did not happen within {timeout:.0f}s")

    def show(self, *props: str, unit: str = "xce-agent.service") -> dict[str, str]:
        out = self.run("systemctl", "show", unit, *[f"-p{p}" for p in props])
        return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)

    def journal(self) -> str:
        return self.run(
            "journalctl",
            "--no-pager",
            "-b",
            "-u",
            "xce-agent.service",
            "-u",
            "xce-controller.service",
            "-u",
            "cloud-init.service",
            "-u",
            "cloud-final.service",
        ).stdout

    def shutdown(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.cgroup is not None:
            remove_cgroup(self.cgroup)
            self.cgroup = None


BOOT_TOOLS = ("systemd-nspawn", "debootstrap", "dpkg-buildpackage", "nsenter", "zstd")


def boot_marks(tools: tuple[str, ...] = BOOT_TOOLS) -> list[pytest.MarkDecorator]:
    """The marks of an end-to-end module: e2e, and skipped with the reason without root or tools."""
    missing = [t for t in tools if shutil.which(t) is None]
    return [
        pytest.mark.e2e,
        pytest.mark.skipif(os.geteuid() != 0, reason="end-to-end boot needs root"),
        pytest.mark.skipif(
            bool(missing),
            reason=f"end-to-end boot needs {', '.join(missing)} (make e2e-deps installs them)",
        ),
    ]
