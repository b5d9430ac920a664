"""The .deb and the .rpm build from this tree and pass lintian and rpmlint."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def need(*tools: str) -> pytest.MarkDecorator:
    missing = [t for t in tools if shutil.which(t) is None]
    return pytest.mark.skipif(
        bool(missing), reason=f"needs {', '.join(missing)} (make e2e-deps installs them)"
    )


@need("dpkg-buildpackage", "lintian")
def test_deb_builds_with_distro_dependencies_and_passes_lintian(tmp_path: Path) -> None:
    out = subprocess.run(
        [str(ROOT / "packaging/build-deb.sh"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    deb = Path(out.stdout.strip().splitlines()[-1])
    depends = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True, text=True, check=True
    ).stdout
    for package in (
        "python3-click",
        "python3-yaml",
        "python3-psutil",
        "python3-requests",
        "python3-sdnotify",
    ):
        assert package in depends
    assert "fastapi" not in depends
    files = subprocess.run(
        ["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True
    ).stdout
    assert "lib/systemd/system/xce-agent.service" in files
    assert "usr/share/man/man1/xce-agent.1.gz" in files
    assert "xce_agent/controller/" not in files
    changes = next(tmp_path.glob("*.changes"))
    lint = subprocess.run(
        ["lintian", "-I", "-E", "--pedantic", "--fail-on", "warning", str(changes)],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


@need("rpmbuild", "rpmlint")
def test_rpm_builds_with_its_requires_and_passes_rpmlint(tmp_path: Path) -> None:
    out = subprocess.run(
        [str(ROOT / "packaging/build-rpm.sh"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    rpm = out.stdout.strip().splitlines()[-1]
    requires = subprocess.run(
        ["rpm", "-qp", "--requires", rpm], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for package in (
        "python3 >= 3.9",
        "python3-click",
        "python3-pyyaml",
        "python3-psutil",
        "python3-requests",
        "python3-sdnotify",
        "systemd",
    ):
        assert package in requires
    files = subprocess.run(["rpm", "-qpl", rpm], capture_output=True, text=True, check=True).stdout
    assert "/usr/lib/systemd/system/xce-agent.service" in files
    assert "/var/lib/xce-agent" in files and "xce_agent/controller/" not in files
    scripts = subprocess.run(
        ["rpm", "-qp", "--scripts", rpm], capture_output=True, text=True, check=True
    ).stdout
    assert "try-restart xce-agent.service" in scripts
    lint = subprocess.run(
        ["rpmlint", "-c", str(ROOT / "packaging/rpm/rpmlint.toml"), rpm],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "0 errors, 0 warnings" in lint.stdout
