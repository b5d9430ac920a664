"""Many followers of the events stream, each about its own host: a commit wakes them all,
and what each does then must not grow with the number of hosts (the controller's one event
loop serves every other request meanwhile)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from tests.integration.test_observe_controller import CONFIG
from xce_controller.core import lifecycle as lc
from xce_controller.core.config import load_cluster_config
from xce_controller.core.model import AdminAction, Host
from xce_controller.http.events import EventHub
from xce_controller.service import Controller
from xce_controller.store.sqlite import Store

HOSTS, FOLLOWERS = 300, 200


class CountingHosts(dict[str, Host]):
    """The cluster's hosts, counting the scans of all of them."""

    scans = 0

    def values(self) -> Any:
        CountingHosts.scans += 1
        return super().values()


def test_followers_of_many_hosts_do_not_each_scan_every_host(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(CONFIG)
    ctl = Controller(load_cluster_config(tmp_path / "cluster.yaml"), Store(tmp_path / "c.db"))
    facts = []
    for i in range(HOSTS):
        facts += lc.expect(ctl.cluster, ctl.cfg, time.time(), "admin", f"i-{i}", "default", f"h{i}")
    ctl.commit(facts)
    hub = EventHub(ctl)
    ctl.cluster.hosts = CountingHosts(ctl.cluster.hosts)
    seen: dict[str, int] = {}

    async def follower(name: str, since: int) -> None:
        async for body in hub.stream(since, name, follow=True):
            if body is not None:
                seen[name] = body["seq"]

    async def run() -> int:
        since = hub.last_seq()
        names = [f"i-{i}" for i in range(FOLLOWERS)]
        tasks = [asyncio.create_task(follower(n, since)) for n in names]
        while len(hub._waiters) < FOLLOWERS:  # every follower has read and waits
            await asyncio.sleep(0.01)
        before = CountingHosts.scans
        host = ctl.cluster.hosts["i-7"]
        now = time.time()
        ctl.commit(lc.control(ctl.cluster, ctl.cfg, now, "admin", host, AdminAction.DECOMMISSION))
        while len(hub._waiters) < FOLLOWERS:  # every follower has read again
            await asyncio.sleep(0.01)
        scans = CountingHosts.scans - before
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return scans

    scans = asyncio.run(run())
    assert seen == {"i-7": hub.last_seq()}  # the commit reached its host's follower only
    assert scans < FOLLOWERS / 10, scans  # was one scan of every host per follower
    ctl.store.close()


def test_a_host_filter_names_the_host_in_any_case(tmp_path: Path) -> None:
    """Host names compare without regard to case everywhere else (DNS): so does --host."""
    (tmp_path / "cluster.yaml").write_text(CONFIG)
    ctl = Controller(load_cluster_config(tmp_path / "cluster.yaml"), Store(tmp_path / "c.db"))
    ctl.commit(lc.expect(ctl.cluster, ctl.cfg, time.time(), "admin", "i-1", "default", "Node1"))
    hub = EventHub(ctl)
    key = ctl.cluster.host_by_name("node1")
    assert key is not None
    assert hub.host_keys("node1") == hub.host_keys("NODE1") == {key.key}
    assert hub.host_keys("i-1") == {key.key}  # an instance id as it is
    assert hub.host_keys("node2") == set()
    ctl.store.close()
