"""Steps of the agent's start: the runner of its components, entering its cgroup, the
record of itself.

They run before the event loop, on the agent's thread (agent.py); an error in containing or
recording itself ends the start (tests/integration/test_start_failures.py).
"""

from __future__ import annotations

import logging
import os
import time

from xce_agent.config.agent import AgentConfig
from xce_agent.controller.credential import HostCredential
from xce_agent.controller.handoff import Handoff, HandoffRunner, tls_environment
from xce_agent.core.membership import JOIN_FIRST_ROLES
from xce_agent.state import AgentRecord, AgentState
from xce_agent.supervision import cgroups
from xce_agent.supervision.boot import boot_id
from xce_agent.supervision.identity import ProcessIdentity, start_ticks
from xce_agent.supervision.process import ProcessRunner
from xce_agent.supervision.supervisor import Supervisor
from xce_agent.system.reader import reader_of

log = logging.getLogger("xce_agent.agent")


def contain(
    detection: cgroups.Detection,
    detected: bool,
    previous: AgentState | None,
    runner: ProcessRunner,
    supervisor: Supervisor,
) -> cgroups.Detection:
    """Move into the `agent` leaf of the delegated cgroup, or fall back and say why. A
    detected tree follows the previous agent's record (`detected`: not a test's choice)."""
    if detected and previous is not None:
        detection = cgroups.inherit(detection, previous.cgroup_root)
    detection = cgroups.enter(detection)
    runner.cgroups = detection.tree  # before the limits are read: they depend on it
    level = logging.INFO if detection.tree else logging.WARNING
    log.log(level, "components are contained by %s", detection.description)
    for name in supervisor.specs:
        note = supervisor.limits_note(name)
        if note:
            level = logging.WARNING if "NOT enforced" in note else logging.INFO
            log.log(level, "%s: limits %s", name, note)
    return detection


def self_record(config: AgentConfig) -> AgentRecord:
    """This process, as the state names the agent that runs (single_agent.py checks it)."""
    ticks = start_ticks(os.getpid())
    return AgentRecord(
        pid=os.getpid(),
        create_time=ProcessIdentity(0, ticks, "", "", ()).started_epoch(),
        boot_id=boot_id(),
        started_at=time.time(),
        config=str(config.path),
        start_ticks=ticks,
    )


def handoff_for(config: AgentConfig, stored: HostCredential | None) -> Handoff:
    """What a worker-role component is handed: the controller's URLs, its credential (from
    the host's, `stored`: never the join token), the TLS settings, its reader's access."""
    ctl = config.controller
    workers = [c for c in config.components if c.role in JOIN_FIRST_ROLES]
    return Handoff(
        config.state_directory,
        reader_of(workers),
        ",".join(ctl.urls) if ctl else "",  # XCE_CONTROLLER_URL: xcecli's list form
        stored.worker_secret or None if stored else None,
        tls_environment(ctl),
    )


def runner_for(
    config: AgentConfig,
    handoff: Handoff,
    runner: ProcessRunner | None,
    containment: cgroups.Detection | None,
) -> tuple[ProcessRunner, cgroups.Detection]:
    """The runner that starts components (a test's, else the one that hands the worker its
    template and credential) and the containment it starts them in (detected unless given)."""
    if runner is not None:
        return runner, containment or cgroups.Detection(None, "test runner")
    detection = containment or cgroups.detect(config.state_directory.resolve())
    real = HandoffRunner(
        handoff,
        JOIN_FIRST_ROLES,
        owner=str(config.state_directory.resolve()),
        cgroups=detection.tree,
    )
    return real, detection
