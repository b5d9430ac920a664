#!/usr/bin/env python3
"""Build one product's wheel from this tree and install it into a package's staging root.

usage: install_product.py PRODUCT --destdir DIR --purelib DIR [--scripts DIR]
       [--interpreter PATH] [--installer NAME] [--wheel-dir DIR]

PRODUCT is a directory name under packaging/python/ (xce-protocol, xce-agent, xce-controller,
xce-provisioner): its pyproject.toml names the product, its version, dependencies and entry
points, and its import package is the product name with '_' for '-'. The wheel holds that
package only and is installed with the `installer` library into DESTDIR under an explicit
scheme, so a .deb or an .rpm carries exactly its own modules, entry points and RECORD, for
whichever Python the scheme names (the RPM's python3.9 site-packages, Debian's dist-packages).

The wheel is written here with the standard library: the build needs no setuptools of any
version (RHEL 9 and Amazon Linux 2023 ship setuptools older than pyproject metadata), only
`installer` and, before Python 3.11, `tomli`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import sys
import zipfile
from pathlib import Path
from typing import Any

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef, import-not-found, unused-ignore]

ROOT = Path(__file__).resolve().parents[2]
PRODUCTS = ROOT / "packaging" / "python"
# Fixed timestamps make the wheel, and so the package, reproducible.
EPOCH = (2020, 1, 1, 0, 0, 0)


def read_product(product: str) -> dict[str, Any]:
    with open(PRODUCTS / product / "pyproject.toml", "rb") as handle:
        project: dict[str, Any] = tomllib.load(handle)["project"]
    return project


def import_package(project: dict[str, Any]) -> str:
    return str(project["name"]).replace("-", "_")


def metadata(project: dict[str, Any]) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"Author: {project['authors'][0]['name']}",
        "License: MIT",
        f"Requires-Python: {project['requires-python']}",
    ]
    lines += [f"Requires-Dist: {req}" for req in project.get("dependencies", [])]
    for extra, reqs in sorted(project.get("optional-dependencies", {}).items()):
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {req}; extra == "{extra}"' for req in reqs]
    return "\n".join(lines) + "\n"


def entry_points(project: dict[str, Any]) -> str:
    scripts = project.get("scripts", {})
    if not scripts:
        return ""
    return "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(scripts.items()))


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def sources(package: str) -> list[Path]:
    """The package's modules and typing marker: no caches, no stray files."""
    top = ROOT / package
    found = [p for p in top.rglob("*") if p.is_file() and p.suffix in (".py", ".typed")]
    return sorted(p for p in found if "__pycache__" not in p.parts)


def build_wheel(project: dict[str, Any], out: Path) -> Path:
    package = import_package(project)
    dist = f"{package}-{project['version']}"
    files: list[tuple[str, bytes]] = [
        (str(p.relative_to(ROOT)), p.read_bytes()) for p in sources(package)
    ]
    info = f"{dist}.dist-info"
    files.append((f"{info}/METADATA", metadata(project).encode()))
    wheel = "Wheel-Version: 1.0\nGenerator: xce install_product\nRoot-Is-Purelib: true\n"
    files.append((f"{info}/WHEEL", (wheel + "Tag: py3-none-any\n").encode()))
    points = entry_points(project)
    if points:
        files.append((f"{info}/entry_points.txt", points.encode()))
    record = [_record_line(name, data) for name, data in files] + [f"{info}/RECORD,,"]
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dist}-py3-none-any.whl"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files:
            entry = zipfile.ZipInfo(name, EPOCH)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, data)
    path.write_bytes(buffer.getvalue())
    return path


def install(wheel: Path, args: argparse.Namespace) -> None:
    from installer import install as install_wheel
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    scheme = {
        "purelib": args.purelib,
        "platlib": args.purelib,
        "scripts": args.scripts,
        "data": "/usr",
        "headers": "/usr/include/xce",
    }
    destination = SchemeDictionaryDestination(
        scheme,
        interpreter=args.interpreter,
        script_kind="posix",
        destdir=args.destdir,
        bytecode_optimization_levels=(),  # byte-compiled by the package's own tools
    )
    with WheelFile.open(wheel) as source:
        install_wheel(source, destination, {"INSTALLER": f"{args.installer}\n".encode()})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("product", choices=sorted(p.name for p in PRODUCTS.iterdir() if p.is_dir()))
    parser.add_argument("--destdir", required=True)
    parser.add_argument("--purelib", required=True)
    parser.add_argument("--scripts", default="/usr/bin")
    parser.add_argument("--interpreter", default="/usr/bin/python3")
    parser.add_argument("--installer", default="dpkg")
    parser.add_argument("--wheel-dir", default=str(ROOT / "build" / "wheels"))
    args = parser.parse_args(argv)
    wheel = build_wheel(read_product(args.product), Path(args.wheel_dir))
    install(wheel, args)
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
