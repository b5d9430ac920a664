"""Six hours of a 300-host fleet, written into a controller's database in a few seconds: the
controller's own methods (expect, join, heartbeat, notice, control, its timers' due facts,
commit) on a clock the story moves, ending at the real now. A controller started on the
database afterwards shows it as it would have lived it (the status page's picture, paging).

  0:00-1:00  300 instances expected and joined (240 default, 60 gpu), one job each on 40
  2:30       12 spot preemption notices: those hosts closed, then gone (lost 30 min later)
  3:00       scale in: 60 hosts decommissioned; 40 drain (a job each) until their 20-minute
             timeout, 20 go at once; the provisioner returns 50 of them
  4:00       5 more hosts fall silent: lost 30 min later
  5:00-5:30  7 new instances expected; 4 join, 3 are still expected at the end
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from xce_controller.admin_verbs import Expectation
from xce_controller.core import deadlines
from xce_controller.core import lifecycle as lc
from xce_controller.core.config import ClusterConfig
from xce_controller.core.model import JOINED, AdminAction, HostState
from xce_controller.service import Controller
from xce_controller.store.sqlite import Store
from xce_protocol.notices import Notice, NoticeKind

HOUR = 3600.0
CONFIG = """\
version: 1
heartbeat_interval: 10s
host_loss_grace: 30m
agent_max_restart_backoff: 30s
rejoin_allowance: 10s
defaults: {join_deadline: 2h, drain_timeout: 20m, drain_policy: requeue}
auth: {admin_token: adm1n, read_token: r3ad, join_token: j0in-t0ken}
templates:
  default: {slots: 4}
  gpu: {slots: 8}
"""


class StoryClock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@dataclass
class Story:
    ctl: Controller
    clock: StoryClock
    silent: set[str]  # hosts that stopped heartbeating

    def at(self, offset: float, start: float) -> None:
        """Move to `offset` after the start, heartbeating the living and firing timers as
        the controller would have every 5 virtual minutes on the way."""
        target = start + offset
        while self.clock.now < target:
            self.clock.now = min(target, self.clock.now + 300.0)
            self.beat()
            self.fire()

    def beat(self) -> None:
        for host in list(self.ctl.cluster.hosts.values()):
            if host.name and host.name not in self.silent and host.state in JOINED:
                self.ctl.heartbeat(host, {})

    def fire(self) -> None:
        ctl, now = self.ctl, self.clock.now
        for host in list(ctl.cluster.hosts.values()):
            due = deadlines.host_due(
                ctl.cluster, ctl.cfg, now, host, ctl.seen.get(host.key), ctl.alive_since
            )
            if due:
                ctl.commit(due)

    def join(self, n: int, template: str) -> None:
        instance = f"i-{n:04d}"
        self.ctl.expect("provisioner", Expectation(instance, template))
        req = lc.JoinRequest(name=f"node{n:03d}", instance_id=instance, token="j0in-t0ken")
        self.ctl.join(req)


def write(db: Path, cfg: ClusterConfig, end: float | None = None) -> dict[str, int]:
    """The story into `db`, ending at `end` (default: now); what it left, by state."""
    end = time.time() if end is None else end
    start = end - 6 * HOUR
    clock = StoryClock(start)
    ctl = Controller(cfg, Store(db), clock)
    story = Story(ctl, clock, set())
    try:
        for n in range(300):  # the first hour: the fleet comes up
            story.at(n * 12.0, start)
            story.join(n, "gpu" if n % 5 == 0 else "default")
        for n in range(40):  # a job on each of the hosts the scale-in will drain
            ctl.submit("admin", ["sleep", "36000"], 4, host=f"node{n + 100:03d}")
        story.at(2.5 * HOUR, start)
        for n in range(200, 212):  # spot preemptions: closed at once, gone after
            host = ctl.find_host(f"node{n:03d}")
            deadline = clock.now + 120
            ctl.notice(host, Notice(NoticeKind.PREEMPTION, "aws", f"spot-{n}", deadline))
            story.silent.add(host.name)
        story.at(3 * HOUR, start)
        for n in range(100, 160):  # scale in
            ctl.control(f"node{n:03d}", AdminAction.DECOMMISSION, "admin", why="scale in")
        story.at(3.6 * HOUR, start)
        for host in ctl.to_return()[:50]:
            ctl.ack_return("provisioner", host.instance_id)
        story.at(4 * HOUR, start)
        story.silent.update(f"node{n:03d}" for n in range(20, 25))
        for n in range(300, 307):
            story.at(5 * HOUR + (n - 300) * 240.0, start)
            if n < 304:
                story.join(n, "default")
            else:
                ctl.expect("provisioner", Expectation(f"i-{n:04d}", "default"))
        story.at(6 * HOUR - 1, start)
        counts: dict[str, int] = {s.value: 0 for s in HostState}
        for host in ctl.cluster.hosts.values():
            counts[host.state.value] += 1
        return counts
    finally:
        ctl.store.close()
