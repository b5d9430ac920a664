"""What the controller answers its provisioner and its admins: expected instances, the
to-return list, retirements and power steps; host listings, jobs, and the admin's actions on
a host (mixed into service.Controller, which owns the state these read and move).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xce_controller.core import addressing, credentials, notices, power
from xce_controller.core import jobs as jobmodel
from xce_controller.core import lifecycle as lc
from xce_controller.core.config import ClusterConfig
from xce_controller.core.model import TERMINAL, AdminAction, Cluster, Fact, Host, HostState, Job
from xce_controller.lease_desk import LeaseDesk

# The lease a provisioner's call is made under, and its grant: ("", 0) is none (an admin, a
# provisioner run by hand), which is not checked.
Held = tuple[str, int]
NO_LEASE: Held = ("", 0)


@dataclass(frozen=True)
class Expectation:
    """What the provisioner says of an instance it created: `POST /v1/expected`."""

    instance_id: str
    template: str
    name: str = ""
    address: str = ""
    deadline_in: float | None = None
    provider: str = ""
    join_token: str = ""
    mint_join_token: bool = False


class AdminVerbs:
    # The controller's, declared for the verbs (service.Controller sets them).
    cluster: Cluster
    cfg: ClusterConfig
    clock: Callable[[], float]
    leases: LeaseDesk

    def commit(self, facts: list[Fact]) -> set[str]:
        raise NotImplementedError  # service.Controller.commit

    # --- provisioner --------------------------------------------------------------------
    def expect(self, by: str, wanted: Expectation, held: Held = NO_LEASE) -> tuple[Host, str]:
        """Record an expected instance; the join token minted for it, if asked (shown once)."""
        self._fence(*held)
        if wanted.join_token and wanted.mint_join_token:
            raise lc.Refused("conflict", 409, "join_token and mint_join_token: one of them")
        token = credentials.mint() if wanted.mint_join_token else wanted.join_token
        # Its strength, and that it is no role's token: lc.expect (core/tokens.py).
        now = self.clock()
        deadline = now + wanted.deadline_in if wanted.deadline_in else None
        self.commit(
            lc.expect(
                self.cluster,
                self.cfg,
                now,
                by,
                wanted.instance_id,
                wanted.template,
                wanted.name,
                wanted.address,
                deadline,
                wanted.provider,
                token,
            )
        )
        return self.cluster.hosts[wanted.instance_id], token if wanted.mint_join_token else ""

    def expected_hosts(self) -> list[Host]:
        wanted = (HostState.EXPECTED, HostState.OVERDUE)
        return [h for h in self.cluster.hosts.values() if h.state in wanted]

    def to_return(self) -> list[Host]:
        return lc.to_return(self.cluster)

    def ack_return(self, by: str, instance_id: str, held: Held = NO_LEASE) -> Host:
        self._fence(*held)
        self.commit(lc.ack_return(self.cluster, self.clock(), by, instance_id))
        return self.cluster.hosts[instance_id]

    def provisioned_hosts(self, lease: str = "", token: int = 0) -> list[Host]:
        """Every provisioned record; read under a lease, only by its current holder (a
        provisioner that lost its lease learns it at its next pass, even with nothing to do)."""
        self._fence(lease, token)
        hosts = [h for h in self.cluster.hosts.values() if h.provisioned]
        return sorted(hosts, key=lambda h: h.key)

    def retire(
        self,
        by: str,
        instance_id: str,
        why: str,
        drain_timeout: float | None,
        held: Held = NO_LEASE,
    ) -> Host:
        """The provisioner decommissions one of its own instances (its idle policy): a drain
        like an admin's, for a provisioned record only, named by its instance id."""
        self._fence(*held)
        host = self.cluster.by_instance(instance_id)
        if host is None or not host.provisioned:
            raise lc.Refused("not_found", 404, f"no provisioned instance {instance_id}")
        now = self.clock()
        action = AdminAction.DECOMMISSION
        self.commit(
            lc.control(self.cluster, self.cfg, now, by, host, action, drain_timeout, None, why)
        )
        return self.cluster.hosts[host.key]

    def power_step(self, by: str, report: power.PowerReport) -> Host:
        """Record a provisioner's power step (core/power.py), fenced by its lease."""
        self._fence(report.lease, report.token)
        self.commit(power.report(self.cluster, self.clock(), by, report))
        found = self.cluster.by_instance(report.instance_id)
        assert found is not None  # power.report refused an unknown one
        return found

    def _fence(self, lease: str, token: int) -> None:
        if not lease:
            power.check_grant(lease, token, 0, False)  # none, unless a token came without it
            return
        held = self.leases.current(lease)
        power.check_grant(lease, token, held.token, held.live(self.leases.monotonic()))

    # --- admin ------------------------------------------------------------------------
    def listed_hosts(self, everything: bool) -> list[Host]:
        """Hosts by name; the decommissioned and returned ones only with `everything`."""
        hidden = () if everything else TERMINAL
        shown = [h for h in self.cluster.hosts.values() if h.state not in hidden]
        return sorted(shown, key=lambda h: h.name or h.key)

    def template_uses(self) -> dict[str, int]:
        """How many live hosts use each template."""
        uses: dict[str, int] = {}
        for h in self.cluster.hosts.values():
            if h.state not in TERMINAL:
                uses[h.template] = uses.get(h.template, 0) + 1
        return uses

    def submit(self, by: str, command: list[str], slots: int, host: str = "") -> Job:
        facts = jobmodel.submit(self.cluster, self.clock(), by, command, slots, host)
        job_id = int(facts[0].data["id"])
        self.commit(facts)
        return self.cluster.jobs[job_id]

    def find_host(self, name: str) -> Host:
        """The record `name` means: a host name, an instance id or an expected address."""
        return addressing.resolve(self.cluster, name)

    def cancel(self, job_id: int, by: str) -> None:
        self.commit(jobmodel.cancel(self.cluster, self.clock(), by, job_id))

    def control(self, name: str, action: AdminAction, by: str, **params: Any) -> Host:
        host = self.find_host(name)
        now = self.clock()
        facts = lc.control(self.cluster, self.cfg, now, by, host, action, **params)
        if action is AdminAction.CLOSE:
            facts += notices.after_admin_close(now, by, host)
        self.commit(facts)
        return self.cluster.hosts[host.key]
