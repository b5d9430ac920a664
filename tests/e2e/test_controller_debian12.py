"""The controller on Debian 12's own FastAPI 0.92, pydantic 1.10 and uvicorn 0.17.

The development venv has current releases (pydantic 2); the xce-controller .deb runs on
Debian's. In the cached bookworm rootfs with those packages (the one tests/e2e/test_cluster.py
installs the .deb into), under systemd-nspawn without booting, the controller's unit tests and
its API, shutdown, authorization-matrix, lease and read-deadline integration tests run from
this tree: what meets those libraries (INTEGRATION, DESELECTED and ONLY say what is left out,
and why). Not here either: the OpenAPI document (pydantic 1 words some schemas differently;
the committed one is pydantic 2's) and the schemathesis fuzz test (not in Debian 12). The
PostgreSQL store and replica tests run on Debian's psycopg 3.1 and PostgreSQL 15, so the
.deb's Suggests are what is tested. Needs root and systemd-nspawn.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.machines import ensure_controller_cache, nspawn_command

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("systemd-nspawn", "debootstrap", "zstd")
missing = [t for t in TOOLS if shutil.which(t) is None]
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="a Debian 12 rootfs needs root"),
    pytest.mark.skipif(
        bool(missing),
        reason=f"a Debian 12 rootfs needs {', '.join(missing)} (make e2e-deps installs them)",
    ),
]
# What runs through FastAPI's routing, security and OpenAPI, pydantic's validation and
# answers, uvicorn's server and shutdown, and psycopg. Not here: test_agent_controller.py (about
# 35 s): its subject is the agents' side of the protocol, which runs on Debian 12 from the .deb
# in test_boot.py and test_cluster.py (the latter against this controller from its .deb); the
# controller's answers it reads are the ones test_controller_api.py and the authorization
# matrix assert here. Nor test_identity.py (about 45 s): its subject is the agent's identity
# across restarts and clones, decided by the controller's core; the join answers it reads are
# test_controller_api.py's and the matrix's.
INTEGRATION = (
    "tests/integration/test_controller_api.py",
    "tests/integration/test_controller_stop.py",
    "tests/integration/test_authorization.py",
    "tests/integration/test_leases_api.py",
    "tests/integration/test_read_deadline.py",
    # The PostgreSQL store and replicas on Debian 12's psycopg 3.1 and PostgreSQL 15.
    "tests/integration/test_pg_store.py",
    "tests/integration/test_replicas.py",
)

# Tests of those files whose subject is not where the versions differ (about 10 s): lease
# logic on the store (a restart's wait of one TTL, a damaged row rebuilt from the facts; the
# store's statements on psycopg 3.1 are test_pg_store.py's and test_replicas.py's). Prefixes
# of node ids: a renamed test runs again, it is not lost.
LEASES = "tests/integration/test_leases_api.py::"
DESELECTED = (
    LEASES + "test_kill_9_and_restart_keep_tokens_and_wait_one_ttl",
    LEASES + "test_a_damaged_lease_row_is_rebuilt_from_the_facts",
)
# The HTTP tests run on the SQLite store only here (about 75 s less): what differs on
# PostgreSQL is the store, and psycopg 3.1 meets it in the two files that test it.
ONLY = "not postgres or test_pg_store or test_replicas"


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("debian12-controller") / "rootfs"
    root.mkdir()
    subprocess.run(
        ["tar", "-C", str(root), "--zstd", "-xf", str(ensure_controller_cache())], check=True
    )
    yield root
    shutil.rmtree(root, ignore_errors=True)


# What checks the development tree's generated files and examples (the reference, man pages
# and completion generated with the build's click, the example units against the installed
# commands), not the controller on Debian 12's libraries.
BUILD_CHECKS = {"tests/unit/test_clidocs.py", "tests/unit/test_examples.py"}


def controller_unit_tests() -> list[str]:
    found = []
    for path in sorted((ROOT / "tests/unit").glob("test_*.py")):
        if str(path.relative_to(ROOT)) in BUILD_CHECKS:
            continue
        if re.search(r"^(from|import) xce_controller", path.read_text(), re.M):
            found.append(str(path.relative_to(ROOT)))
    return found


def test_the_rootfs_has_debians_fastapi_pydantic_and_uvicorn(rootfs: Path) -> None:
    probe = "import fastapi, pydantic, uvicorn; print(fastapi.__version__, pydantic.VERSION)"
    out = subprocess.run(
        nspawn_command(rootfs, "python3", "-c", probe), capture_output=True, text=True
    )
    fastapi, pydantic = out.stdout.split()
    assert fastapi.startswith("0.92") and pydantic.startswith("1."), out.stdout + out.stderr


def test_the_rootfs_has_debians_psycopg_3_1_and_postgresql(rootfs: Path) -> None:
    probe = "import psycopg, psycopg_pool; print(psycopg.__version__, psycopg_pool.__version__)"
    out = subprocess.run(
        nspawn_command(rootfs, "python3", "-c", probe), capture_output=True, text=True
    )
    assert out.stdout.startswith("3.1."), out.stdout + out.stderr
    assert list((rootfs / "usr/lib/postgresql").glob("*/bin/initdb")), "no PostgreSQL server"


def test_controller_tests_pass_on_debian_12_packages(rootfs: Path) -> None:
    tests = [*controller_unit_tests(), *INTEGRATION, *[f"--deselect={d}" for d in DESELECTED]]
    tests += ["-k", ONLY]
    command = nspawn_command(
        rootfs, "python3", "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"
    )
    out = subprocess.run([*command, *tests], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    # A store test that skipped (no server, no psycopg) would pass unseen.
    skipped = [line for line in out.stdout.splitlines() if line.startswith("SKIPPED")]
    assert not [line for line in skipped if "test_pg_store" in line or "test_replicas" in line], (
        "\n".join(skipped)
    )
    passed = re.search(r"(\d+) passed", out.stdout)
    assert passed and int(passed.group(1)) >= 50, out.stdout[-2000:]
