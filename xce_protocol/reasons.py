"""Reason codes: one stable, machine-readable word for why something changed.

Every host transition, refusal, drain outcome, job requeue or kill, component restart,
give-up and decommission carries one, on either side, next to the human text and the actor.
They appear in facts, API answers, `xcecli`, `xce-agent status`, the journal (field
REASON_CODE) and metrics labels. Codes are never renamed or reused; new ones may be added, so
a reader must accept a code it does not know. docs/observability.md is the catalogue (a test
keeps it equal to this enum).
"""

from __future__ import annotations

import enum


class Reason(str, enum.Enum):
    # --- a host's record at the controller ---------------------------------------------
    INSTANCE_EXPECTED = "instance_expected"  # the provisioner recorded the instance
    JOINED_PROVISIONED = "joined_provisioned"  # joined as the expected instance
    JOINED_UNPROVISIONED = "joined_unprovisioned"  # joined without a record (unmatched: accept)
    REJOINED_AFTER_LOSS = "rejoined_after_loss"  # a lost host joined again
    AGENT_RECONNECTED = "agent_reconnected"  # the same incarnation joined again (agent restart)
    CREDENTIAL_RENEWED = "credential_renewed"  # a (re)started agent got the next credential
    CREDENTIAL_CONFIRMED = "credential_confirmed"  # the renewed credential came back: older stale
    HEARTBEAT_RESUMED = "heartbeat_resumed"  # a lost host was heard from again
    JOIN_DEADLINE_MISSED = "join_deadline_missed"  # expected, not joined by its deadline
    HEARTBEAT_LOST = "heartbeat_lost"  # no heartbeat for longer than the host-loss grace
    ADMIN_OPENED = "admin_opened"
    ADMIN_CLOSED = "admin_closed"
    DECOMMISSION_REQUESTED = "decommission_requested"  # drain started (admin or provisioner)
    DRAINED = "drained"  # decommissioned once its jobs ended
    DRAIN_TIMEOUT_REQUEUED = "drain_timeout_requeued"  # drain timed out; its jobs requeued
    DRAIN_TIMEOUT_KILLED = "drain_timeout_killed"  # drain timed out; its jobs killed
    DECOMMISSIONED_IDLE = "decommissioned_idle"  # not running anything: decommissioned at once
    INSTANCE_RETURNED = "instance_returned"  # the provisioner gave the instance back
    WORKER_FATAL_CLOSED = "worker_fatal_closed"  # the agent reported its worker FATAL: closed
    WORKER_FATAL_REPLACED = "worker_fatal_replaced"  # ... and on_worker_fatal: replace drains it
    WORKER_RECOVERED = "worker_recovered"  # the worker runs again: the host closed for it opens
    JOIN_GAVE_UP = "join_gave_up"  # the agent gave up joining by its own deadline: overdue
    # --- cloud notices ----------------------------------------------------------------------
    NOTICE_PREEMPTION = "notice_preemption"  # spot/preemptible reclaim announced
    NOTICE_TERMINATION = "notice_termination"  # the instance goes away (retirement, ...)
    NOTICE_MAINTENANCE = "notice_maintenance"  # scheduled maintenance or reboot
    NOTICE_REBALANCE = "notice_rebalance"  # rebalance advice: closed to new work
    NOTICE_LAPSED = "notice_lapsed"  # the advice passed without an interruption: reopened
    NOTICE_SHUTDOWN = "notice_shutdown"  # the host's operating system is going down
    NOTICE_STOP = "notice_stop"  # the agent is stopped on purpose: closed, drained, not lost
    NOTICE_ENDED = "notice_ended"  # the provider withdrew the notice
    # --- jobs -------------------------------------------------------------------------------
    JOB_REQUEUED_HOST_LOST = "job_requeued_host_lost"
    JOB_REQUEUED_NOTICE = "job_requeued_notice"
    JOB_CANCELLED = "job_cancelled"
    # --- refusals (the `code` of an error answer; `error` keeps its kind) --------------
    REFUSED_DECOMMISSIONED = "refused_decommissioned"  # the host was decommissioned: never rejoin
    REFUSED_UNMATCHED = "refused_unmatched"
    REFUSED_DUPLICATE = "refused_duplicate"
    REFUSED_INSTANCE_ID_REQUIRED = "refused_instance_id_required"  # the join lacks its instance id
    REFUSED_NAME_DECOMMISSIONED = "refused_name_decommissioned"  # name of a decommissioned host
    REFUSED_ALREADY_JOINED = "refused_already_joined"  # a second join with the join token
    REFUSED_TOKEN_EXPIRED = "refused_token_expired"  # noqa: S105 - a code: the join token expired
    REFUSED_STALE_INCARNATION = "refused_stale_incarnation"  # an earlier incarnation's credential
    REFUSED_UNKNOWN_CREDENTIAL = "refused_unknown_credential"  # no host holds the credential
    REFUSED_UNAUTHORIZED = "refused_unauthorized"
    REFUSED_FORBIDDEN = "refused_forbidden"
    REFUSED_UNKNOWN_HOST = "refused_unknown_host"
    REFUSED_UNKNOWN_TEMPLATE = "refused_unknown_template"
    REFUSED_CONFLICT = "refused_conflict"
    REFUSED_NOT_RETURNABLE = "refused_not_returnable"
    REFUSED_NOT_FOUND = "refused_not_found"
    REFUSED_BAD_REQUEST = "refused_bad_request"
    REFUSED_TOO_LARGE = "refused_too_large"
    REFUSED_RATE_LIMITED = "refused_rate_limited"
    REFUSED_STORAGE_UNAVAILABLE = "refused_storage_unavailable"
    REFUSED_OUTCOME_UNKNOWN = "refused_outcome_unknown"  # the commit's answer lost: may be stored
    REFUSED_LEASE_HELD = "refused_lease_held"  # another holder has the lease until it expires
    REFUSED_LEASE_LIMIT = "refused_lease_limit"  # a new lease, and the controller keeps its most
    REFUSED_LEASE_HOST_LIMIT = "refused_lease_host_limit"  # a new lease, and the host has its most
    REFUSED_AMBIGUOUS = "refused_ambiguous"  # a host reference that fits several records
    REFUSED_STALE_LEASE = "refused_stale_lease"  # a power report under a lease token not current
    REFUSED_OTHER = "refused_other"  # a refusal kind newer than this catalogue
    # --- components on the host (agent) ---------------------------------------------------
    COMPONENT_STARTED = "component_started"  # started on request (boot, join, operator)
    COMPONENT_ADOPTED = "component_adopted"  # found running after an agent restart
    COMPONENT_EXITED = "component_exited"  # exited; restarted after its backoff
    COMPONENT_SPAWN_FAILED = "component_spawn_failed"  # could not be started at all
    STATE_UNWRITABLE = "state_unwritable"  # not started: its record could not be saved first
    COMPONENT_PROBE_FAILED = "component_probe_failed"  # liveness probe failed: restarted
    COMPONENT_STOPPED = "component_stopped"  # stopped on request
    WORKER_FATAL = "worker_fatal"  # a worker-role component given up (crash loop)
    COMPONENT_FATAL = "component_fatal"  # another role's component given up
    WORKER_HELD = "worker_held"  # exited saying its rejoin was refused: held, controller asked
    WORKER_STOPPED_DECOMMISSIONED = "worker_stopped_decommissioned"
    UNEXPECTED_EVENT = "unexpected_event"  # a machine was handed an event its table refuses
    # --- the agent's standing with the controller ---------------------------------------
    CONTROLLER_CONNECTED = "controller_connected"
    CONTROLLER_UNREACHABLE = "controller_unreachable"
    CONTROLLER_REFUSED = "controller_refused"
    CONTROLLER_CONFIRMED_ACTIVE = "controller_confirmed_active"
    JOIN_DEADLINE_PASSED = "join_deadline_passed"  # never accepted by instance.join_deadline
    # --- leases (controller: grants and releases; agent: a singleton's hold) ---------------
    LEASE_GRANTED = "lease_granted"  # granted while free (never held, or released)
    LEASE_TAKEN_OVER = "lease_taken_over"  # granted to a new holder: the last one's expired
    LEASE_REGRANTED = "lease_regranted"  # granted again to a holder whose own grant expired
    LEASE_RELEASED = "lease_released"  # its holder gave it back
    LEASE_FORGOTTEN = "lease_forgotten"  # no one held it for the retention: its name is free
    LEASE_EXPIRED = "lease_expired"  # a grant ran out without a renewal or a release
    LEASE_WANTED = "lease_wanted"  # the agent asks for a singleton's lease
    LEASE_REQUEST_FAILED = "lease_request_failed"  # no usable answer to a lease request
    LEASE_NOT_RENEWED = "lease_not_renewed"  # no renewal by ttl - margin: singleton stopped
    LEASE_LOST = "lease_lost"  # the controller says another holder has it: singleton stopped
    LEASE_NOT_HELD = "lease_not_held"  # a singleton found running without a hold: stopped
    # --- power (the provisioner: each step it takes on a machine, and why) ------------------
    POWER_ON_EXPECTED = "power_on_expected"  # expected and powered off: powered on
    POWER_OFF_RETURN = "power_off_return"  # to give back: graceful shutdown
    POWER_OFF_FORCED = "power_off_forced"  # the graceful shutdown timed out: forced off
    POWER_CYCLE_OVERDUE = "power_cycle_overdue"  # repair step 1: overdue, power cycled once
    POWER_OFF_OVERDUE = "power_off_overdue"  # repair step 2: still overdue, powered off
    POWER_CONFIRMED = "power_confirmed"  # the machine reached the power state asked for
    POWER_GAVE_UP = "power_gave_up"  # the power state was not reached after the last attempt
    POWER_OFF_EXCLUDED = "power_off_excluded"  # not powered off: in a state the operator excluded
    BMC_UNREACHABLE = "bmc_unreachable"  # no connection to the BMC (refused, reset, DNS)
    BMC_TIMEOUT = "bmc_timeout"  # the BMC did not answer in time
    BMC_TLS_FAILED = "bmc_tls_failed"  # the BMC's certificate did not verify
    BMC_AUTH_FAILED = "bmc_auth_failed"  # the BMC refused the credentials (401, 403)
    BMC_NOT_FOUND = "bmc_not_found"  # the BMC has no such system (404)
    BMC_REFUSED = "bmc_refused"  # the BMC refused the request (another 4xx)
    BMC_FAILED = "bmc_failed"  # the BMC answered a server error (5xx)
    BMC_BAD_ANSWER = "bmc_bad_answer"  # the BMC's answer was malformed, too large or unknown


def refusal(kind: str) -> Reason:
    """The code of a refusal of `kind` (an error answer's `error`)."""
    try:
        return Reason(f"refused_{kind}")
    except ValueError:
        return Reason.REFUSED_OTHER


def parse(value: object) -> str:
    """A code read from the wire or the disk: kept if it looks like one (a newer peer's
    code is kept as it is), "" otherwise."""
    if isinstance(value, str) and 0 < len(value) <= 64 and value.replace("_", "").isalnum():
        return value if value.islower() else ""
    return ""
