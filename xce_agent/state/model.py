"""`AgentState`: everything the agent keeps about itself, and its JSON form (STATE_VERSION).

What a restarted agent needs to re-adopt its components, what `xce-agent status` shows, and
the decommission tombstone (derived from the membership, not stored beside it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from xce_agent.core import pending_notices, singleton_holds
from xce_agent.core.membership import MembershipState
from xce_agent.core.pending_notices import PendingNotice
from xce_agent.core.planned_stop import Draining
from xce_agent.core.singleton_holds import SingletonHold
from xce_agent.state import reading
from xce_agent.state.records import (
    AgentRecord,
    ComponentRecord,
    Lifecycle,
    StartIntent,
    Tombstone,
)

STATE_VERSION = 1


@dataclass(frozen=True)
class AgentState:
    lifecycle: Lifecycle = Lifecycle.STARTING
    instance_id: str = ""
    roles: tuple[str, ...] = ()
    agent: AgentRecord | None = None
    components: tuple[ComponentRecord, ...] = ()
    membership: MembershipState = field(default_factory=MembershipState)
    updated_at: float = 0.0
    containment: str = ""  # how components are contained: a cgroup, or process groups and why
    cgroup_root: str = ""  # the agent's delegated cgroup, when it has one
    notices: tuple[PendingNotice, ...] = ()  # the provider's notices pending (status shows them)
    singletons: tuple[SingletonHold, ...] = ()  # each singleton's lease hold (status shows them)
    starting: tuple[StartIntent, ...] = ()  # starts begun whose identity is not saved yet
    planned_stop: Draining | None = None  # a planned stop's drain under way (status shows it)

    def component(self, name: str) -> ComponentRecord | None:
        return next((c for c in self.components if c.name == name), None)

    @property
    def tombstone(self) -> Tombstone | None:
        m = self.membership
        return Tombstone(m.instance_id, m.detail, m.since) if m.decommissioned else None

    def to_json(self) -> dict[str, Any]:
        m = self.membership
        tomb = self.tombstone
        return {
            "version": STATE_VERSION,
            "lifecycle": self.lifecycle.value,
            "instance_id": self.instance_id,
            "roles": list(self.roles),
            "agent": asdict(self.agent) if self.agent else None,
            "components": [_component_json(c) for c in self.components],
            # Beside the records, not in them: an older agent reading this file (a downgrade)
            # would take an unknown field in a record for a corrupt state.
            "codes": {c.name: c.code for c in self.components if c.code},
            "limits": {c.name: c.limits for c in self.components if c.limits},
            "controller": {
                "state": m.standing.value,
                "since": m.since,
                "host": m.host,
                "detail": m.detail,
                "instance_id": m.instance_id,
                "retry_until": m.retry_until,
                "reported": m.reported,
                "link_warning": m.link_warning,
            },
            "tombstone": asdict(tomb) if tomb else None,
            "updated_at": self.updated_at,
            "containment": self.containment,
            "cgroup_root": self.cgroup_root,
            "notices": [n.to_json() for n in self.notices],
            "singletons": [h.to_json() for h in self.singletons],
            "starting": [asdict(i) for i in self.starting],
            "planned_stop": self.planned_stop.to_json() if self.planned_stop else None,
        }

    @classmethod
    def from_json(cls, data: Any) -> AgentState:
        """Rebuild from JSON; ValueError for anything that is not a state of our version."""
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise ValueError(f"expected a state of version {STATE_VERSION}")
        try:
            agent = reading.agent_record(data["agent"]) if data.get("agent") else None
            tomb = Tombstone(**data["tombstone"]) if data.get("tombstone") else None
            codes, limits = data.get("codes") or {}, data.get("limits") or {}
            comps = tuple(
                replace(
                    reading.component(c),
                    code=str(codes.get(c.get("name"), "")),
                    limits=str(limits.get(c.get("name"), "")),
                )
                for c in data.get("components", [])
                if reading.named(c)
            )
            return cls(
                lifecycle=reading.lifecycle(data["lifecycle"]),
                instance_id=str(data.get("instance_id", "")),
                roles=tuple(data.get("roles", ())),
                agent=agent,
                components=comps,
                membership=reading.membership(data.get("controller") or {}, tomb),
                updated_at=float(data.get("updated_at", 0.0)),
                containment=str(data.get("containment", "")),
                cgroup_root=str(data.get("cgroup_root", "")),
                notices=pending_notices.from_json(data.get("notices")),
                singletons=singleton_holds.from_json(data.get("singletons")),
                starting=reading.intents(data.get("starting")),
                planned_stop=Draining.from_json(data.get("planned_stop")),
            )
        except (KeyError, TypeError, OverflowError) as exc:  # Overflow: a number past a float
            raise ValueError(f"malformed state: {exc}") from None


def _component_json(record: ComponentRecord) -> dict[str, Any]:
    data = asdict(record)
    data.pop("code")
    data.pop("limits")
    return data
