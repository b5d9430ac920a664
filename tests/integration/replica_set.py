"""Controller replicas (`xce-controller serve` processes) on one PostgreSQL store, for tests."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import requests

from tests.integration import history_checker as history
from tests.integration.controller_proc import ControllerProcess
from xce_controller.store.open import open_store

ADMIN_TOKEN, JOIN_TOKEN = "adm1n-t0ken", "j0in-t0ken"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
CONFIG = f"""\
version: 1
heartbeat_interval: 1s
host_loss_grace: 4s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
defaults: {{join_deadline: 10m, drain_timeout: 5m, drain_policy: requeue}}
auth: {{admin_token: {ADMIN_TOKEN}, join_token: {JOIN_TOKEN}}}
templates:
  default: {{slots: 2}}
"""


class Replicas:
    def __init__(self, root: Path, dsn: str, count: int, config: str = CONFIG) -> None:
        self.procs = []
        for n in range(count):
            workdir = root / f"replica{n}"
            workdir.mkdir()
            self.procs.append(ControllerProcess(workdir, config, db=dsn))

    def start(self) -> Replicas:
        for proc in self.procs:
            proc.start()
        return self

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()

    def __getitem__(self, n: int) -> ControllerProcess:
        return self.procs[n]

    @property
    def urls(self) -> list[str]:
        return [p.url for p in self.procs]


def call(
    url: str, method: str, path: str, body: Any = None, bearer: str = ADMIN_TOKEN, **params: Any
) -> requests.Response:
    return requests.request(
        method,
        url + path,
        json=body if method != "GET" else None,
        params=params or None,
        headers={"Authorization": f"Bearer {bearer}"},
        timeout=30,
    )


def join(url: str, name: str) -> str:
    """Join host `name` through `url`: its credential."""
    r = call(url, "POST", "/v1/join", {"host": name, "boot_id": "b1"}, JOIN_TOKEN)
    assert r.status_code == 200, r.text
    return str(r.json()["credential"])


def metric(url: str, name: str) -> float:
    """The value of the first series of metric `name` a replica serves."""
    text = call(url, "GET", "/metrics").text
    return float(next(ln for ln in text.splitlines() if ln.startswith(name)).split()[-1])


def stored_drains(dsn: str) -> Counter[str]:
    """How many drains the store recorded for each host ("host:NAME"), once the whole
    history it holds was checked sound (history_checker)."""
    store = open_store(dsn)
    try:
        log = store.facts()
    finally:
        store.close()
    assert history.problems(log) == []
    return Counter(f.data["key"] for f in log if f.kind == "drain")
