"""The host's membership in the cluster: join, template handoff, tombstone, decommission.

It owns the controller link and decides, on the event loop's thread, what the supervisor
does about what the controller says: start the worker once joined, leave it alone while the
controller is unreachable, stop it for good once this host is decommissioned.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from xce_agent import __version__
from xce_agent.config import AgentConfig
from xce_agent.state import AgentState, ControllerContact, Tombstone
from xce_agent.supervision.process import boot_id
from xce_agent.supervision.supervisor import Supervisor
from xce_protocol.atomic_file import write_atomic
from xce_protocol.protocol import PROTOCOL, Identity, template_of

if TYPE_CHECKING:
    from xce_agent.link import ControllerLink

log = logging.getLogger(__name__)

TEMPLATE_FILE = "template.json"
# Roles whose components need the template from the join answer before they start.
JOIN_FIRST_ROLES = ("worker",)


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
    return found


class Membership:
    def __init__(
        self,
        config: AgentConfig,
        supervisor: Supervisor,
        get_state: Callable[[], AgentState],
        set_state: Callable[[AgentState], None],
        post: Callable[[Callable[[], None]], None],
    ) -> None:
        self.config = config
        self.supervisor = supervisor
        self.get_state = get_state
        self.set_state = set_state
        self.post = post
        self.me = Identity(host_name(config), config.instance.id)
        self.link: ControllerLink | None = None
        self.template_path = config.state_directory / TEMPLATE_FILE
        self._reported = False

    # --- start ------------------------------------------------------------------------
    def tombstoned(self) -> bool:
        tomb = self.get_state().tombstone
        if tomb is None:
            return False
        if tomb.instance_id != self.config.instance.id:
            # Same disk image, new instance: the old instance's decommission is not ours.
            log.info(
                "clearing tombstone of instance %s: this is instance %s",
                tomb.instance_id,
                self.config.instance.id,
            )
            self.set_state(replace(self.get_state(), tombstone=None))
            return False
        return True

    def start(self) -> None:
        """Start what may start now; the worker waits for the join unless already running."""
        if self.tombstoned():
            tomb = self.get_state().tombstone
            assert tomb is not None
            log.warning(
                "instance %s was decommissioned (%s): the worker stays stopped",
                tomb.instance_id,
                tomb.reason,
            )
            self._stop_workers(f"decommissioned: {tomb.reason}")
            self._contact("decommissioned", tomb.reason)
            self.set_state(replace(self.get_state(), lifecycle="decommissioned"))
            return
        env = self._template_env()
        for name, spec in self.supervisor.specs.items():
            waits = self.config.controller is not None and spec.role in JOIN_FIRST_ROLES
            if not waits:
                self.supervisor.start(name, "agent started")
            elif env is not None and name in self.supervisor.handles:
                self.supervisor.runner.set_extra_env(name, env)
        if self.config.controller is None:
            return
        # Imported here: requests costs ~7 MB of RSS an agent without a controller never needs.
        from xce_agent.controller_client import ControllerClient
        from xce_agent.link import ControllerLink

        client = ControllerClient(self.config.controller, self.me)
        self.link = ControllerLink(
            client, self, self.post, self.join_payload, self.heartbeat_payload
        )
        self._contact("waiting", "waiting for controller")
        self.link.start()

    def stop(self) -> None:
        if self.link is not None:
            self.link.stop()

    # --- payloads (read from the link's threads: state is an immutable snapshot) --------
    def join_payload(self) -> dict[str, Any]:
        inst = self.config.instance
        return {
            "protocol": PROTOCOL,
            "host": self.me.host,
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

    def heartbeat_payload(self) -> dict[str, Any]:
        state = self.get_state()
        return {
            "protocol": PROTOCOL,
            "instance_id": self.config.instance.id,
            "boot_id": boot_id(),
            "agent_state": state.lifecycle,
            "components": [
                {
                    "name": c.name,
                    "state": c.phase,
                    "pid": c.pid,
                    "restarts": c.restarts,
                    "last_exit": c.last_exit,
                }
                for c in state.components
            ],
        }

    # --- LinkHandler (event loop thread) ------------------------------------------------
    def joined(self, body: dict[str, Any]) -> None:
        if self.get_state().tombstone is not None:
            return
        template = template_of(body)
        if template is None:
            log.error("join answer carries no usable template; not starting the worker")
            self._contact("connected", "join answer without a usable template")
            return
        self._write_template(body, template)
        env = self._template_env() or {}
        state = str(body.get("state", ""))
        self._contact("connected", f"joined as {self.me.host} ({state})")
        for name, spec in self.supervisor.specs.items():
            if spec.role in JOIN_FIRST_ROLES:
                self.supervisor.runner.set_extra_env(name, env)
                self.supervisor.start(name, "joined the controller")

    def contact(self, ok: bool, detail: str) -> None:
        if self.get_state().tombstone is not None:
            return
        if ok:
            self._contact("connected", detail and f"host {detail}")
        else:
            self._contact("unreachable", detail)

    def decommissioned(self, reason: str, body: dict[str, Any]) -> None:
        """A well-formed refusal for this host and instance: stop the worker for good."""
        if self.get_state().tombstone is not None:
            return
        log.warning(
            "controller refused %s/%s as decommissioned: %s",
            self.me.host,
            self.me.instance_id,
            reason,
        )
        tomb = Tombstone(self.config.instance.id, reason, time.time())
        self.set_state(replace(self.get_state(), tombstone=tomb, lifecycle="decommissioned"))
        self._contact("decommissioned", reason)
        self._stop_workers(f"decommissioned: {reason}")
        self.components_changed()

    def components_changed(self) -> None:
        """Once decommissioned and the worker is down, report that and let the link go."""
        if self.get_state().tombstone is None or self.link is None or self._reported:
            return
        down = ("stopped", "exited", "fatal", "held")
        for name, spec in self.supervisor.specs.items():
            if (
                spec.role in JOIN_FIRST_ROLES
                and self.supervisor.states[name].phase.value not in down
            ):
                return
        self._reported = True
        self.link.final_report()

    def confirmed_active(self) -> None:
        """The worker exited with a 'decommissioned' code but the controller still wants us."""
        for name, cstate in self.supervisor.states.items():
            if cstate.phase.value == "held":
                log.warning("%s: controller says this host is active; starting it again", name)
                self.supervisor.start(name, "controller confirmed the host is active")

    def worker_says_decommissioned(self, name: str, code: int) -> None:
        log.warning("%s exited with code %d (rejoin refused): asking the controller", name, code)
        if self.link is not None:
            self.link.confirm()

    # --- helpers ----------------------------------------------------------------------
    def _stop_workers(self, reason: str) -> None:
        for name, spec in self.supervisor.specs.items():
            if spec.role in JOIN_FIRST_ROLES:
                self.supervisor.stop(name, reason)

    def _contact(self, state: str, detail: str) -> None:
        current = self.get_state().controller
        since = current.since if current.state == state else time.time()
        contact = ControllerContact(state, since, self.me.host, detail)
        if state != current.state:
            level = logging.WARNING if state == "unreachable" else logging.INFO
            log.log(level, "controller contact: %s%s", state, f" ({detail})" if detail else "")
        if contact != current:
            self.set_state(replace(self.get_state(), controller=contact))

    def _write_template(self, body: dict[str, Any], template: dict[str, Any]) -> None:
        assert self.config.controller is not None
        doc = {
            "host": self.me.host,
            "instance_id": self.me.instance_id,
            "controller_url": self.config.controller.url,
            "heartbeat_interval": body.get("heartbeat_interval"),
            "template": template,
        }
        write_atomic(self.template_path, json.dumps(doc, indent=2) + "\n", mode=0o644)

    def _template_env(self) -> dict[str, str] | None:
        try:
            doc = json.loads(Path(self.template_path).read_text())
        except (OSError, ValueError):
            return None
        assert self.config.controller is not None
        env = {
            "XCE_TEMPLATE_FILE": str(self.template_path),
            "XCE_HOST_NAME": self.me.host,
            "XCE_INSTANCE_ID": self.me.instance_id,
            "XCE_CONTROLLER_URL": self.config.controller.url,
            "XCE_TEMPLATE": str(doc.get("template", {}).get("name", "")),
            "XCE_SLOTS": str(doc.get("template", {}).get("slots", 1)),
        }
        if self.config.controller.token:
            env["XCE_TOKEN"] = self.config.controller.token
        return env
