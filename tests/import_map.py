"""Print which folders of each package import which: the picture in docs/architecture.md.

Run from a checkout: `.venv/bin/python -m tests.import_map`. It reads the imports with grimp
(the library lint-imports uses); tests/unit/test_architecture_doc.py keeps the doc equal to it.
"""

from __future__ import annotations

import grimp

PACKAGES = ("xce_protocol", "xce_agent", "xce_controller")


def room(module: str) -> str:
    """The folder a module stands in (its package and first sub-package), or its own name;
    the shared protocol package as one room."""
    parts = module.split(".")
    return parts[0] if parts[0] == "xce_protocol" else ".".join(parts[:2])


def edges() -> dict[str, set[str]]:
    graph = grimp.build_graph(*PACKAGES)
    arrows: dict[str, set[str]] = {}
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            source, target = room(module), room(imported)
            if source != target and target.split(".")[0] in PACKAGES:
                arrows.setdefault(source, set()).add(target)
    return arrows


def render() -> str:
    lines = []
    for source, targets in sorted(edges().items()):
        lines.append(f"{source} -> {', '.join(_short(source, t) for t in sorted(targets))}")
    return "\n".join(lines) + "\n"


def _short(source: str, target: str) -> str:
    """A room of the same package by its folder's name alone."""
    package, _, folder = target.partition(".")
    if package != source.split(".", maxsplit=1)[0]:
        return target
    return folder or "(package)"


if __name__ == "__main__":
    print(render(), end="")
