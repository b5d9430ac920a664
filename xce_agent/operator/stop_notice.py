"""`xce-agent stop` without a running agent tells the controller itself: the `stop` notice.

After `systemctl stop xce-agent` the components run on, unheard; stopping them with no word to
the controller would leave it to take the host for lost after the grace, and to list it for
return. So the command sends the request a running agent sends at a planned stop
(docs/protocol.md, "A planned stop"), with the host credential the agent stored: the
controller closes the host, requeues its jobs at once (the notice's deadline is now: nobody
is left to wait for a drain, and the worker stops next), and does not take the host for lost
while its agent is down; the next agent's start ends the notice and reopens the host. The
request is bounded (NOTICE_BUDGET, at most the controller's timeout) and whatever happens
the local stop goes on: a failure is one line, saying that the controller was not told and
what follows. Nothing is sent with `--no-drain` (the old stop, which tells nobody), without a
controller, for a decommissioned host, after a planned stop (the stopped agent told it), or
without a credential of this very host (a host that never joined: nothing to say).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from xce_agent.config.agent import AgentConfig
from xce_agent.controller.credential import CredentialStore, HostCredential
from xce_agent.controller.notice_sender import notice_payload
from xce_agent.controller.reports import host_name
from xce_agent.core.membership import Standing
from xce_agent.state import AgentState, Lifecycle
from xce_protocol.notices import Notice, NoticeKind
from xce_protocol.protocol import Answer, Identity, Outcome, printable

NOTICE_BUDGET = 5.0  # seconds the notice may take, whatever the controller does

LOST = "the host is lost after the grace and its jobs requeued then"


def why_not(config: AgentConfig, state: AgentState, drain: float | None) -> str:
    """ "" when the command tells the controller, else why not ("-": nothing to say)."""
    if config.controller is None:
        return "-"
    if state.membership.decommissioned:
        return "-"  # the controller is done with this host
    if state.lifecycle is Lifecycle.STOPPED:
        return "-"  # a planned stop (or a stop like this one) already told it
    if drain is not None and drain <= 0:
        return "--no-drain"
    return ""


Send = Callable[[AgentConfig, HostCredential, dict[str, object], float], Answer]


def _send(
    config: AgentConfig, cred: HostCredential, payload: dict[str, object], budget: float
) -> Answer:
    from xce_agent.controller.client import ControllerClient  # the HTTP code only when used

    assert config.controller is not None
    client = ControllerClient(config.controller, Identity(cred.host, cred.instance_id))
    client.credential = cred
    return client.notice(dict(payload), budget)


def tell_controller(
    config: AgentConfig,
    state: AgentState,
    drain: float | None,
    send: Send = _send,
    wall: Callable[[], float] = time.time,
) -> str:
    """What the controller was told, as a phrase for the command's one line ("" if nothing)."""
    why = why_not(config, state, drain)
    if why == "-":
        return ""
    ctl = config.controller
    assert ctl is not None
    cred = CredentialStore(config.state_directory).load(
        host_name(config), config.instance.id, ctl.urls
    )
    if cred is None:  # never joined (the controller knows no host to lose), unless it says so
        joined = state.membership.standing is Standing.CONNECTED
        return f"the controller was not told (no host credential stored): {LOST}" if joined else ""
    if why:
        return f"the controller was not told ({why}): {LOST}"
    now = wall()
    notice = Notice(NoticeKind.STOP, "agent", f"agent-stop-{now:.3f}", now)
    payload: dict[str, object] = notice_payload(notice, config.instance.id)
    try:
        answer = send(config, cred, payload, min(ctl.timeout, NOTICE_BUDGET))
    except Exception as exc:  # never the stop's problem: it goes on
        answer = Answer(Outcome.RETRY, type(exc).__name__)
    if answer.outcome is Outcome.ACCEPTED:
        return "the controller was told (a stop notice): the host is closed, not lost"
    said = printable(answer.detail or answer.outcome.value)[:200]
    return f"the controller was not told ({said}): {LOST}"
