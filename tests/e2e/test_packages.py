"""The .debs and the RPMs build from this tree, pass lintian and rpmlint, and each carries
exactly its own product: python3-xce-protocol, xce-agent, xce-controller, xce-provisioner."""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_OF = {"xce_protocol": "python3-xce-protocol", "xce_agent": "xce-agent"}
PACKAGE_OF["xce_controller"] = "xce-controller"
PACKAGE_OF["xce_provisioner"] = "xce-provisioner"
# What each package documents under /usr/share/doc/PACKAGE (docs/production.md names them).
EXAMPLES = {
    "xce-agent": ["examples/agent.yaml", "examples/xce-agent-job-limits.conf"],
    "xce-controller": [
        "production.md",
        "examples/controller.yaml",
        "examples/xce-controller-tls.conf",
        "examples/xce-controller-backup.service",
        "examples/xce-controller-backup.timer",
        "examples/alerts.yml",
        "examples/alerts_test.yml",
        "examples/grafana-dashboard.json",
    ],
}


def need(*tools: str) -> pytest.MarkDecorator:
    missing = [t for t in tools if shutil.which(t) is None]
    return pytest.mark.skipif(
        bool(missing), reason=f"needs {', '.join(missing)} (make e2e-deps installs them)"
    )


def _run(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def _built(script: str, out: Path) -> dict[str, str]:
    """Build with one of packaging/build-*.sh; the packages' paths by package name."""
    paths = _run(str(ROOT / "packaging" / script), str(out)).split()
    return {re.sub(r"[_-]\d.*$", "", Path(p).name): p for p in paths}


def _unpacked(deb: str, where: Path) -> Path:
    subprocess.run(["dpkg-deb", "-x", deb, str(where)], check=True)
    return where


def _packages_in(files: str) -> set[str]:
    """Which of the three import packages a file list holds modules of."""
    return {name for name in PACKAGE_OF if re.search(rf"/{name}/\S*\.py\b", files)}


@need("dpkg-buildpackage", "lintian")
def test_debs_build_with_distro_dependencies_and_pass_lintian(tmp_path: Path) -> None:
    debs = _built("build-deb.sh", tmp_path)
    assert set(debs) == {"python3-xce-protocol", "xce-agent", "xce-controller", "xce-provisioner"}
    depends = {name: _run("dpkg-deb", "-f", deb, "Depends") for name, deb in debs.items()}
    for package in ("python3-click", "python3-yaml", "python3-psutil", "python3-requests"):
        assert package in depends["xce-agent"]
    assert "python3-sdnotify" in depends["xce-agent"]
    assert "python3-xce-protocol (= 0.2.0)" in depends["xce-agent"]
    assert (
        "fastapi" not in depends["xce-agent"] and "fastapi" not in depends["python3-xce-protocol"]
    )
    for package in ("python3-fastapi", "python3-pydantic", "python3-uvicorn"):
        assert package in depends["xce-controller"]
    assert "python3-sushy" in depends["xce-provisioner"]
    assert "python3-xce-protocol (= 0.2.0)" in depends["xce-provisioner"]
    files = {name: _run("dpkg-deb", "-c", deb) for name, deb in debs.items()}
    for name, listing in files.items():
        assert {PACKAGE_OF[p] for p in _packages_in(listing)} == {name}, name
    assert "lib/systemd/system/xce-agent.service" in files["xce-agent"]
    assert "usr/share/man/man1/xce-agent.1.gz" in files["xce-agent"]
    for package, command in (
        ("xce-agent", "xce-agent"),
        ("xce-controller", "xce-controller"),
        ("xce-controller", "xcecli"),
        ("xce-provisioner", "xce-provisioner"),
    ):
        assert f"usr/share/man/man1/{command}.1.gz" in files[package]
        for where in (
            f"usr/share/bash-completion/completions/{command}",
            f"usr/share/zsh/vendor-completions/_{command}",
            f"usr/share/fish/vendor_completions.d/{command}.fish",
        ):
            assert where in files[package], where
    page = _unpacked(debs["xce-controller"], tmp_path / "ctl") / "usr/share/man/man1/xcecli.1.gz"
    roff = gzip.decompress(page.read_bytes()).decode()
    for verb in ("why", "events", "leases", "templates", "cancel", "decommission"):
        assert f".B xcecli {verb} " in roff, verb
    page = _unpacked(debs["xce-provisioner"], tmp_path / "prov") / "usr/share/man/man1"
    roff = gzip.decompress((page / "xce-provisioner.1.gz").read_bytes()).decode()
    assert ".B xce\\-provisioner run " in roff and "XCE_LEASE_TOKEN" in roff  # generated
    assert "./usr/bin/xce-agent" in files["xce-agent"] and "xcecli" not in files["xce-agent"]
    for path in (
        "lib/systemd/system/xce-controller.service",
        "./etc/xce/controller.yaml",
        "./usr/bin/xcecli",
        "./usr/bin/xce-controller",
        "xce_controller-0.2.0.dist-info/RECORD",
    ):
        assert path in files["xce-controller"]
    assert "./usr/bin/xce-provisioner" in files["xce-provisioner"]
    assert "usr/share/man/man1/xce-provisioner.1.gz" in files["xce-provisioner"]
    for name, paths in EXAMPLES.items():
        for path in paths:
            assert f"./usr/share/doc/{name}/{path}" in files[name], (name, path)
    for name in ("xce-agent", "xce-controller"):  # what changed, and what works together
        assert f"./usr/share/doc/{name}/CHANGELOG.md.gz" in files[name]
        assert f"./usr/share/doc/{name}/upgrades.md" in files[name]
    scripts = _run("dpkg-deb", "-I", debs["xce-agent"], "prerm")
    assert 'if [ "$1" = "remove" ]' in scripts and "xce-agent stop" in scripts
    changes = next(tmp_path.glob("*.changes"))
    lint = subprocess.run(
        ["lintian", "-I", "-E", "--pedantic", "--fail-on", "warning", str(changes)],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


@need("rpmbuild", "rpmlint")
def test_rpms_target_python_39_with_their_requires_and_pass_rpmlint(tmp_path: Path) -> None:
    rpms = _built("build-rpm.sh", tmp_path)
    assert set(rpms) == {"python3-xce-protocol", "xce-agent", "xce-controller", "xce-provisioner"}
    requires = {n: _run("rpm", "-qp", "--requires", r).splitlines() for n, r in rpms.items()}
    for name in rpms:
        assert "python(abi) = 3.9" in requires[name], requires[name]
    for package in (
        "python3 >= 3.9",
        "python3-click",
        "python3-pyyaml",
        "python3-psutil",
        "python3-requests",
        "python3-sdnotify",
        "python3-xce-protocol = 0.2.0",
        "systemd",
    ):
        assert package in requires["xce-agent"]
    assert not [r for r in requires["xce-agent"] if "fastapi" in r]
    assert "python3-fastapi >= 0.92" in requires["xce-controller"]
    assert "python3-sushy >= 4.3" in requires["xce-provisioner"]
    files = {name: _run("rpm", "-qpl", rpm) for name, rpm in rpms.items()}
    for name, listing in files.items():
        assert {PACKAGE_OF[p] for p in _packages_in(listing)} == {name}, name
        assert "python3.11" not in listing and "/usr/lib/python3.9/site-packages/" in listing
    assert "/usr/lib/systemd/system/xce-agent.service" in files["xce-agent"]
    assert "/var/lib/xce-agent" in files["xce-agent"]
    assert "/usr/lib/systemd/system/xce-controller.service" in files["xce-controller"]
    for name, paths in EXAMPLES.items():  # Debian's rpm versions the directory, RHEL's not
        for path in paths:
            where = rf"^/usr/share/doc/{name}(-0\.2\.0)?/{re.escape(path)}$"
            assert re.search(where, files[name], re.M), (name, path)
    for name, package in (
        ("xce-controller", "xce-controller"),
        ("xcecli", "xce-controller"),
        ("xce-provisioner", "xce-provisioner"),
    ):
        assert f"/usr/share/man/man1/{name}.1.gz" in files[package]
        assert f"/usr/share/bash-completion/completions/{name}" in files[package]
        assert f"/usr/share/zsh/site-functions/_{name}" in files[package]
        assert f"/usr/share/fish/vendor_completions.d/{name}.fish" in files[package]
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    archive = subprocess.run(["rpm2cpio", rpms["xce-agent"]], capture_output=True, check=True)
    subprocess.run(["cpio", "-idm", "--quiet"], input=archive.stdout, cwd=unpacked, check=True)
    # The target's interpreter, not the build host's.
    assert (unpacked / "usr/bin/xce-agent").read_text().splitlines()[0] == "#!/usr/bin/python3"
    scripts = _run("rpm", "-qp", "--scripts", rpms["xce-agent"])
    assert "try-restart xce-agent.service" in scripts
    assert "xce-agent stop" in scripts and "rm -rf" not in scripts  # erase keeps the state
    lint = subprocess.run(
        ["rpmlint", "-c", str(ROOT / "packaging/rpm/rpmlint.toml"), *rpms.values()],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "0 errors, 0 warnings" in lint.stdout
