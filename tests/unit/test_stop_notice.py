"""`xce-agent stop` without a running agent: whether it tells the controller itself, the request
it sends (the agent's `stop` notice, its deadline now), and the one phrase it says whatever the
controller does."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from xce_agent.config.agent import AgentConfig, load_config
from xce_agent.controller.credential import CredentialStore, HostCredential
from xce_agent.core.membership import MembershipState, Standing
from xce_agent.operator import stop_notice
from xce_agent.state import AgentState, Lifecycle
from xce_protocol.protocol import Answer, Outcome

URL = "http://127.0.0.1:9"
JOINED = AgentState(lifecycle=Lifecycle.DETACHED, membership=MembershipState(Standing.CONNECTED))


def config(tmp_path: Path, controller: bool = True) -> AgentConfig:
    path = tmp_path / "agent.yaml"
    ctl = f"controller: {{url: '{URL}', timeout: 30s}}\n" if controller else ""
    path.write_text(
        f"version: 1\n{ctl}instance: {{id: i-1, host_name: node1}}\n"
        f"roles:\n  worker:\n    components:\n      w:\n        command: [{sys.executable}]\n"
        f"state_directory: '{tmp_path / 'state'}'\n"
    )
    loaded = load_config(path)
    loaded.state_directory.mkdir(mode=0o700, exist_ok=True)
    return loaded


def stored(cfg: AgentConfig) -> None:
    cred = HostCredential("node1", "i-1", URL, 3, "host-secret", "worker-secret")
    CredentialStore(cfg.state_directory).save(cred)


class Fake:
    def __init__(self, answer: Answer | Exception) -> None:
        self.answer = answer
        self.sent: list[tuple[HostCredential, dict[str, object], float]] = []

    def __call__(
        self, cfg: AgentConfig, cred: HostCredential, payload: dict[str, object], budget: float
    ) -> Answer:
        self.sent.append((cred, payload, budget))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_the_agents_stop_notice_is_sent_with_the_stored_credential(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    stored(cfg)
    send = Fake(Answer(Outcome.ACCEPTED))
    said = stop_notice.tell_controller(cfg, JOINED, None, send, wall=lambda: 1000.0)
    assert said == "the controller was told (a stop notice): the host is closed, not lost"
    [(cred, payload, budget)] = send.sent
    assert cred.secret == "host-secret" and cred.incarnation == 3
    assert payload["kind"] == "stop" and payload["provider"] == "agent"
    assert payload["event_id"] == "agent-stop-1000.000" and payload["instance_id"] == "i-1"
    assert payload["deadline"] is not None  # now: nobody waits for a drain
    assert budget == stop_notice.NOTICE_BUDGET  # bounded, below the controller's 30 s


@pytest.mark.parametrize(
    "answer",
    [Answer(Outcome.RETRY, "controller unreachable (Connection refused)"), OSError("boom")],
)
def test_a_failure_is_one_phrase_and_says_what_follows(
    tmp_path: Path, answer: Answer | Exception
) -> None:
    cfg = config(tmp_path)
    stored(cfg)
    said = stop_notice.tell_controller(cfg, JOINED, 60.0, Fake(answer))
    assert said.startswith("the controller was not told (") and "\n" not in said
    assert said.endswith(stop_notice.LOST)


def test_nothing_is_sent_when_nobody_is_to_be_told(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    stored(cfg)
    send = Fake(Answer(Outcome.ACCEPTED))
    gone = replace(JOINED, membership=MembershipState(Standing.DECOMMISSIONED))
    stopped = replace(JOINED, lifecycle=Lifecycle.STOPPED)  # a planned stop told it
    assert stop_notice.tell_controller(cfg, gone, None, send) == ""
    assert stop_notice.tell_controller(cfg, stopped, None, send) == ""
    assert stop_notice.tell_controller(config(tmp_path, False), JOINED, None, send) == ""
    no_drain = stop_notice.tell_controller(cfg, JOINED, 0.0, send)
    assert no_drain == f"the controller was not told (--no-drain): {stop_notice.LOST}"
    assert send.sent == []


def test_without_a_credential_a_host_that_never_joined_says_nothing(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    send = Fake(Answer(Outcome.ACCEPTED))
    waiting = replace(JOINED, membership=MembershipState(Standing.WAITING))
    assert stop_notice.tell_controller(cfg, waiting, None, send) == ""
    said = stop_notice.tell_controller(cfg, JOINED, None, send)
    assert said.startswith("the controller was not told (no host credential stored)")
    assert send.sent == []
