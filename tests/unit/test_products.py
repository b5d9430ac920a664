"""The installable products agree with the development install and hold only their own code.

packaging/python/<product>/pyproject.toml declares what a .deb or .rpm installs; the root
pyproject.toml is what developers install. Their dependencies, entry points and versions must
not drift apart, and each product's wheel carries its own import package only.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

if sys.version_info < (3, 11):
    pytest.skip("reads pyproject files with tomllib (Python 3.11+)", allow_module_level=True)
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PRODUCTS = {
    "xce-protocol": "xce_protocol",
    "xce-agent": "xce_agent",
    "xce-controller": "xce_controller",
    "xce-provisioner": "xce_provisioner",
}


def _project(path: Path) -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads(path.read_text())["project"]
    return project


ROOT_PROJECT = _project(ROOT / "pyproject.toml")


def _product(name: str) -> dict[str, Any]:
    return _project(ROOT / "packaging/python" / name / "pyproject.toml")


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "install_product", ROOT / "packaging/python/install_product.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _requirements(reqs: list[str]) -> dict[str, str]:
    """name -> specifier, names normalised the way installers compare them."""
    found = {}
    for req in reqs:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(.*)", req)
        assert match, req
        found[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return found


def test_every_product_dependency_is_the_root_one_with_the_same_bound() -> None:
    extras = ROOT_PROJECT["optional-dependencies"]
    root = _requirements(
        ROOT_PROJECT["dependencies"] + extras["controller"] + extras["plot"] + extras["provisioner"]
    )
    union: dict[str, str] = {}
    for name in PRODUCTS:
        project = _product(name)
        extras = [r for reqs in project.get("optional-dependencies", {}).values() for r in reqs]
        for dist, spec in _requirements(project["dependencies"] + extras).items():
            if dist == "xce-protocol":
                assert spec == f"=={ROOT_PROJECT['version']}", name
                continue
            assert root.get(dist) == spec, f"{name}: {dist}{spec} vs root {root.get(dist)}"
            union[dist] = spec
    assert union == root  # and nothing the root installs is missing from every product


def test_entry_points_are_the_roots_and_each_names_its_own_package() -> None:
    union: dict[str, str] = {}
    for name, package in PRODUCTS.items():
        scripts = _product(name).get("scripts", {})
        for script, target in scripts.items():
            assert target.split(".", 1)[0] == package, (name, script, target)
        union.update(scripts)
    assert union == ROOT_PROJECT["scripts"]


def test_versions_agree_everywhere() -> None:
    version = ROOT_PROJECT["version"]
    for name, package in PRODUCTS.items():
        assert _product(name)["version"] == version
        init = (ROOT / package / "__init__.py").read_text()
        assert f'__version__ = "{version}"' in init, package
    changelog = (ROOT / "packaging/debian/changelog").read_text().splitlines()[0]
    assert changelog.startswith(f"xce-agent ({version})")
    spec = (ROOT / "packaging/rpm/xce-agent.spec").read_text()
    assert re.search(rf"^Version:\s+{re.escape(version)}$", spec, re.M)


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_a_products_wheel_holds_its_own_package_only(name: str, tmp_path: Path) -> None:
    builder = _builder()
    wheel = builder.build_wheel(builder.read_product(name), tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = f"{PRODUCTS[name]}-{ROOT_PROJECT['version']}.dist-info"
        record = archive.read(f"{info}/RECORD").decode()
        points = archive.read(f"{info}/entry_points.txt").decode() if name != "xce-protocol" else ""
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {PRODUCTS[name], info}
    assert all(".pyc" not in n and "__pycache__" not in n for n in names)
    # RECORD lists every file of the wheel, so the installed RECORD matches what is installed.
    assert sorted(line.split(",", 1)[0] for line in record.splitlines()) == sorted(names)
    for script in _product(name).get("scripts", {}):
        assert f"{script} = " in points
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / PRODUCTS[name]).rglob("*.py")}
    assert modules <= set(names)
