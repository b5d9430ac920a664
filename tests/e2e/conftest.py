"""What the end-to-end modules share: this tree's .debs, built once per session, and the agent's
base image for the modules that only boot it.

Each module used to build the .debs and install them into a rootfs of its own, about a minute
each on two cores. The .debs are the same for all of them; a machine boots its base as the
lower layer of a volatile overlay (machines.Machine), so a module that only boots machines
leaves the base as it found it and may share one (chroot commands that only read it, such as
`systemd-analyze verify`, do not change it either). test_boot.py purges the package from its
base and test_cluster.py writes the controller's config into the controller's: those bases are
their own, from the shared .debs.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.machines import build_debs, ensure_rootfs_cache, prepare_base


@pytest.fixture(scope="session")
def e2e_debs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """This tree's .debs by package name."""
    return build_debs(tmp_path_factory.mktemp("e2e-debs"))


@pytest.fixture(scope="session")
def agent_image(
    tmp_path_factory: pytest.TempPathFactory, e2e_debs: dict[str, Path]
) -> Iterator[Path]:
    """The bookworm rootfs with python3-xce-protocol and xce-agent installed: boot it, never
    change it (a module that does makes its own with prepare_base)."""
    base = tmp_path_factory.mktemp("e2e-agent-image") / "base"
    prepare_base(
        ensure_rootfs_cache(), base, e2e_debs["python3-xce-protocol"], e2e_debs["xce-agent"]
    )
    yield base
    shutil.rmtree(base, ignore_errors=True)
