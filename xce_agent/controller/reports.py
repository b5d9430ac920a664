"""What the agent tells the controller about this host: the join request and the heartbeat."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import psutil

from xce_agent import __version__
from xce_agent.config.agent import AgentConfig
from xce_agent.state import AgentState
from xce_agent.supervision.process import boot_id
from xce_protocol.protocol import MAX_LAST_EXIT, PROTOCOL


def host_name(config: AgentConfig) -> str:
    return config.instance.host_name or socket.gethostname()


def addresses() -> list[str]:
    found = []
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family in (socket.AF_INET, socket.AF_INET6) and addr.address:
                ip = addr.address.split("%")[0]
                if not ip.startswith("127.") and ip != "::1":
                    found.append(ip)
    return found[:64]  # the controller takes at most 64 (a host with many veths has more)


class Reports:
    """Built on the link's threads from an immutable snapshot of the agent's state."""

    def __init__(self, config: AgentConfig, snapshot: Callable[[], AgentState]) -> None:
        self.config = config
        self.snapshot = snapshot

    def join(self) -> dict[str, Any]:
        inst = self.config.instance
        return {
            "protocol": PROTOCOL,
            "host": host_name(self.config),
            "instance_id": inst.id,
            "template": inst.template,
            "provider": inst.provider,
            "addresses": addresses(),
            "boot_id": boot_id(),
            "roles": list(self.config.roles),
            "resources": {
                "cpus": psutil.cpu_count() or 1,
                "memory_bytes": psutil.virtual_memory().total,
            },
            "agent_version": __version__,
        }

    def heartbeat(self) -> dict[str, Any]:
        state = self.snapshot()
        # The controller shows this as the agent's state; a decommissioned host says so.
        decommissioned = state.membership.decommissioned
        agent_state = "decommissioned" if decommissioned else state.lifecycle.value
        return {
            "protocol": PROTOCOL,
            "instance_id": self.config.instance.id,
            "boot_id": boot_id(),
            "agent_state": agent_state,
            "agent_version": __version__,
            "components": [
                {
                    "name": c.name,
                    "role": c.role,
                    "state": c.phase,
                    "pid": c.pid,
                    "restarts": c.restarts,
                    "last_exit": _clipped(c.last_exit),
                    "code": c.code,
                }
                for c in state.components
            ],
        }


def _clipped(text: str | None) -> str | None:
    """A last exit the controller takes: a failure to start names the command's path, which
    may be longer than a heartbeat carries (the controller refused every heartbeat then)."""
    if text is None or len(text) <= MAX_LAST_EXIT:
        return text
    return text[: MAX_LAST_EXIT - 3] + "..."
