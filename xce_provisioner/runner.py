"""The thin shell around `plan`: read, decide, act, once a pass, until told to stop.

A pass reads the controller's provisioned records (the journal comes with them) and the power
of every machine in the inventory, then carries out what `plan` returns. Nothing is done
without a fresh read of the records: the controller is the journal, so a provisioner that
cannot reach it cannot know what was begun, and waits. A step is written (`begun`) before
its request is sent; a read or a write the controller refuses because the lease moved on
(`stale_lease`) ends the run (exit status 75): another provisioner holds the lease.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

from xce_protocol.reasons import Reason
from xce_provisioner.config import Config
from xce_provisioner.controller import ControllerClient, ControllerError
from xce_provisioner.drivers.base import DriverError, Power, PowerDriver
from xce_provisioner.metrics import Metrics
from xce_provisioner.plan import (
    Ack,
    Act,
    Action,
    Blocked,
    Expect,
    Machine,
    Note,
    Phase,
    Record,
    Retire,
    View,
    idle,
    plan,
)

log = logging.getLogger(__name__)
WARN_EVERY = 60.0  # a repeated warning (the controller is down) at most once a minute
RECENT = 5  # last actions shown in the status file


class Fenced(Exception):
    """The controller refused a step under this run's lease token: another holder has it."""


def _end_if_fenced(exc: ControllerError) -> None:
    """The one refusal that ends the run, of a read or a write: the lease moved on."""
    if exc.kind == "stale_lease":
        raise Fenced(str(exc)) from None


class Runner:
    def __init__(
        self,
        cfg: Config,
        client: ControllerClient,
        drivers: Mapping[str, PowerDriver],
        monotonic: Callable[[], float] = time.monotonic,
        status_file: Path | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.status_file = status_file  # the agent's XCE_STATUS_FILE: shown by its status
        self.wall = wall
        self.recent: deque[str] = deque(maxlen=RECENT)
        self.client = client
        self.drivers = drivers
        self.monotonic = monotonic
        self.metrics = Metrics()
        self.seen: dict[tuple[str, str, int], float] = {}
        self._warned: dict[str, float] = {}
        self._blocked: set[tuple[str, str]] = set()
        self.idle_since: dict[str, float] = {}  # instance id -> first seen open with no job

    def run(self, stop: threading.Event) -> None:
        while True:
            self.once()
            if stop.wait(self.cfg.interval):
                return

    def once(self) -> None:
        try:
            records = self.client.records()
        except ControllerError as exc:
            _end_if_fenced(exc)
            self.metrics.controller_errors += 1
            self._warn("controller", "cannot read the records: %s", exc)
            self._write_metrics()
            self._write_status("cannot read the records")
            return
        now = self.monotonic()
        for record in records.values():
            for step in record.steps:
                self.seen.setdefault(step.key, now)
        self._note_idle(records, now)
        power = {m.name: self._power(m) for m in self.cfg.machines}
        view = View(
            self.cfg.machines, records, power, dict(self.seen), self.cfg.policy, self.idle_since
        )
        for action in plan(view, now):
            self._do(action)
        self._write_metrics()
        self._write_status("ok")
        self._forget(records)

    def _forget(self, records: Mapping[str, Record]) -> None:
        """Keep only what the records still show: the journal of a decision the controller
        no longer lists is not needed again (memory stays flat over months of passes)."""
        shown = {step.key for record in records.values() for step in record.steps}
        for key in [k for k in self.seen if k not in shown]:
            del self.seen[key]
        decisions = {record.decision for record in records.values()}
        self._blocked = {b for b in self._blocked if b[1] in decisions}

    def _note_idle(self, records: Mapping[str, Record], now: float) -> None:
        """Idle time is counted here, on the monotonic clock, from the first pass that saw a
        record idle: a restart counts it again from zero (it decommissions later, never
        earlier)."""
        for iid, record in records.items():
            if idle(record):
                self.idle_since.setdefault(iid, now)
            else:
                self.idle_since.pop(iid, None)

    def _power(self, m: Machine) -> Power:
        try:
            state = self.drivers[m.driver].power(m.system)
        except DriverError as exc:
            self.metrics.bmc_errors[(m.driver, exc.code.value)] += 1
            self._warn(
                f"bmc:{m.name}",
                "%s: cannot read the power: %s [%s]",
                m.name,
                exc.message,
                exc.code.value,
            )
            state = Power.UNKNOWN
        self.metrics.power[m.name] = state
        return state

    def _do(self, action: Action) -> None:
        try:
            if isinstance(action, Act):
                self._act(action)
            elif isinstance(action, Note):
                self._step(
                    action.machine,
                    action.decision,
                    action.action,
                    action.phase,
                    action.attempt,
                    action.code.value,
                )
                log.info(
                    "%s: %s %s (%s)",
                    action.machine.name,
                    action.action,
                    action.phase.value,
                    action.decision,
                )
                self._did(f"{action.machine.name}: {action.action} {action.phase.value}")
            elif isinstance(action, Ack):
                self._ack(action)
            elif isinstance(action, Expect):
                self.client.expect(action.machine, self.cfg.policy.join_deadline)
                log.info(
                    "%s: expected (keep_warm %d)", action.machine.name, self.cfg.policy.keep_warm
                )
                self._did(f"{action.machine.name}: expected (keep_warm)")
            elif isinstance(action, Retire):
                self.client.retire(action.machine.instance_id, action.why)
                self.idle_since.pop(action.machine.instance_id, None)
                log.info("%s: decommissioned: %s", action.machine.name, action.why)
                self._did(f"{action.machine.name}: decommissioned ({action.why})")
            elif isinstance(action, Blocked):
                self._blocked_once(action)
        except ControllerError as exc:
            _end_if_fenced(exc)
            self.metrics.controller_errors += 1
            self._warn("controller", "%s", exc)

    def _step(
        self,
        m: Machine,
        decision: str,
        action: str,
        phase: Phase,
        attempt: int,
        code: str,
        why: str = "",
    ) -> None:
        self.client.step(m.instance_id, decision, action, phase, attempt, code, why)
        self.seen.setdefault((decision, action, attempt), self.monotonic())
        self.metrics.steps[(action, phase.value, code)] += 1

    def _act(self, a: Act) -> None:
        m = a.machine
        self._step(m, a.decision, a.action, Phase.BEGUN, a.attempt, a.code.value)
        try:
            self.drivers[m.driver].request(m.system, a.request)
        except DriverError as exc:
            self.metrics.bmc_errors[(m.driver, exc.code.value)] += 1
            log.warning("%s: %s failed: %s [%s]", m.name, a.action, exc.message, exc.code.value)
            self._step(
                m, a.decision, a.action, Phase.FAILED, a.attempt, exc.code.value, exc.message
            )
            self._did(f"{m.name}: {a.action} failed, attempt {a.attempt} [{exc.code.value}]")
            return
        self._step(m, a.decision, a.action, Phase.ISSUED, a.attempt, a.code.value)
        self._did(f"{m.name}: {a.action} issued, attempt {a.attempt} [{a.code.value}]")
        log.info(
            "%s: %s issued, attempt %d (%s) [%s]",
            m.name,
            a.action,
            a.attempt,
            a.decision,
            a.code.value,
        )

    def _ack(self, a: Ack) -> None:
        try:
            self.client.ack(a.machine.instance_id)
        except ControllerError as exc:
            if exc.kind != "not_returnable":  # returned already (an earlier ack's answer lost)
                raise
        self.metrics.steps[("ack", "confirmed", Reason.INSTANCE_RETURNED.value)] += 1
        log.info("%s: returned (%s)", a.machine.name, a.decision)
        self._did(f"{a.machine.name}: returned")

    def _blocked_once(self, b: Blocked) -> None:
        key = (b.machine.name, b.decision)
        if key not in self._blocked:
            self._blocked.add(key)
            self.metrics.steps[("shutdown", "blocked", b.code.value)] += 1
            log.warning("%s: not powered off: %s [%s]", b.machine.name, b.why, b.code.value)
            self._did(f"{b.machine.name}: not powered off: {b.why} [{b.code.value}]")

    def _warn(self, key: str, message: str, *args: object) -> None:
        now = self.monotonic()
        if now - self._warned.get(key, -WARN_EVERY) >= WARN_EVERY:
            self._warned[key] = now
            log.warning(message, *args)

    def _write_metrics(self) -> None:
        if self.cfg.metrics_file is None:
            return
        try:
            self.metrics.write(self.cfg.metrics_file)
        except OSError as exc:
            self._warn("metrics", "%s: %s", self.cfg.metrics_file, exc.strerror)

    def _did(self, what: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.wall()))
        self.recent.append(f"{stamp} {what}")

    def status_lines(self, controller: str) -> list[str]:
        """What `xce-agent status` shows under this component: the lease, the last pass,
        the last actions (newest last)."""
        lease = self.client.lease
        held = f"lease {lease.name}, token {lease.token}" if lease.name else "no lease (by hand)"
        power = [p.value for p in self.metrics.power.values()]
        counts = ", ".join(f"{power.count(p.value)} {p.value}" for p in Power)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.wall()))
        lines = [held, f"pass {stamp}: controller {controller}; machines {counts}"]
        return lines + [f"last: {line}" for line in self.recent]

    def _write_status(self, controller: str) -> None:
        if self.status_file is None:
            return
        temp = self.status_file.with_name(f".{self.status_file.name}.tmp")
        try:
            with open(temp, "w") as f:
                f.write("\n".join(self.status_lines(controller)) + "\n")
            os.replace(temp, self.status_file)
        except OSError as exc:
            self._warn("status", "%s: %s", self.status_file, exc.strerror)
