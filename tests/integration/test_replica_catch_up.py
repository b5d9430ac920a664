"""A change refused as stale costs the replica the change and the facts appended since its
cursor, not a read of the whole state: the change is taken back in the entries it touched,
the new facts applied, and the decision made again. Two controllers on one PostgreSQL store
race their changes, at two cluster sizes; neither ever reloads, and each one's state is the
log's replay exactly (the take-back leaves no trace in any index).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pg_server import PgCluster
from xce_controller.admin_verbs import Expectation
from xce_controller.core.config import load_cluster_config
from xce_controller.core.model import AdminAction, HostState
from xce_controller.service import Controller
from xce_controller.store.base import StaleState
from xce_controller.store.open import open_store

CONFIG = """\
version: 1
auth: {admin_token: adm1n-t0ken, join_token: j0in-t0ken}
templates:
  default: {slots: 1}
"""
RACES = 12


def _expect(ctl: Controller, name: str) -> None:
    ctl.expect("admin", Expectation(instance_id=name, template="default", name=name))


@pytest.mark.parametrize("hosts", [20, 600])
def test_a_stale_change_applies_the_new_facts_and_never_reloads(
    tmp_path: Path, pg: PgCluster, hosts: int
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    cfg = load_cluster_config(config)
    dsn = pg.database()
    a, b = Controller(cfg, open_store(dsn)), Controller(cfg, open_store(dsn))
    assert a.replica is not None and b.replica is not None
    loads = 0
    load = b.store.load

    def counted():  # type: ignore[no-untyped-def]
        nonlocal loads
        loads += 1
        return load()

    b.store.load = counted  # type: ignore[method-assign]
    try:
        for n in range(hosts):
            _expect(a, f"i-{n}")
        b.replica.catch_up()
        for n in range(RACES):
            a.replica.catch_up()
            _expect(a, f"a-{n}")  # b has not seen it: b's next change is decided on the old log
            a.control(f"i-{n}", AdminAction.DECOMMISSION, "admin")
            with pytest.raises(StaleState):
                _expect(b, f"b-{n}")
            b.replica.catch_up()  # as the API does before it runs the request again
            _expect(b, f"b-{n}")  # decided again on the caught-up state: stored
            assert (
                f"a-{n}" in b.cluster.hosts
                and b.cluster.hosts[f"i-{n}"].state is HostState.DECOMMISSIONED
            )
        a.replica.catch_up()
        assert b.replica.stale == RACES
        assert b.replica.reloads == 0 and loads == 0, (b.replica.reloads, loads)
        # b applied what a appended, and only that: a's facts since b's cursor.
        assert b.replica.applied == hosts + 2 * RACES
        replayed = b.store.replay()
        for ctl in (a, b):
            assert ctl.cluster.journal is None
            assert ctl.cluster == replayed
    finally:
        a.store.close()
        b.store.close()
