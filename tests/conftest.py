"""Fixtures every test directory shares: a PostgreSQL server for the store's second backend.

`pg` starts one server for the whole session (about 2 s, once), only when a test asks for it;
`pg_dsn` is a fresh database on it for one test. `store_db` runs a test once per backend: a
SQLite file, and a PostgreSQL database (skipped, with the reason, where no server can run).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg_server import PgCluster, need_pg


@pytest.fixture(scope="session")
def pg() -> Iterator[PgCluster]:
    need_pg()
    cluster = PgCluster()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def pg_dsn(pg: PgCluster) -> str:
    return pg.database()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test taking `store_db` runs on both backends; a module whose `PG_TESTS` names some
    of its tests runs only those on PostgreSQL too (the time budget of `make test`)."""
    if "store_db" not in metafunc.fixturenames:
        return
    chosen = getattr(metafunc.module, "PG_TESTS", None)
    both = chosen is None or metafunc.function.__name__ in chosen
    metafunc.parametrize("store_db", ["sqlite", "postgres"] if both else ["sqlite"], indirect=True)


@pytest.fixture
def store_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A `--db` value for each backend: the file of today, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "controller.db")
    cluster: PgCluster = request.getfixturevalue("pg")
    return cluster.database()
