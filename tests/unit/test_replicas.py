"""The agent's own list of controller URLs: the config's rules per entry, and which URL a
request goes to (stay while it answers, next on no answer or a 503, never on a refusal)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_config import minimal, problems, write
from xce_agent.config.agent import ControllerConfig, load_config
from xce_agent.controller.bounded_http import HttpFailure, Reply, Target
from xce_agent.controller.client import ControllerClient
from xce_agent.controller.credential import CredentialStore, HostCredential
from xce_protocol import replicas
from xce_protocol.protocol import PROTOCOL, Identity, Outcome

ME = Identity("n1", "i-1")
A, B, C = "http://127.0.0.1:7001", "http://127.0.0.2:7002", "http://127.0.0.3:7003"


# --- the pure choice ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "moves"),
    [
        *[(None, True), (503, True), (502, True), (504, True)],
        *[(200, False), (401, False), (410, False), (429, False), (500, False), (301, False)],
    ],
)
def test_only_no_answer_or_a_gateway_status_moves_to_the_next_url(
    status: int | None, moves: bool
) -> None:
    assert replicas.moves_on(status) is moves


def test_a_request_tries_the_current_url_first_then_each_other_once() -> None:
    assert replicas.attempts(0, 1) == [0]
    assert replicas.attempts(0, 3) == [0, 1, 2]
    assert replicas.attempts(2, 3) == [2, 0, 1]


def test_two_threads_failing_on_one_url_move_once() -> None:
    current = replicas.after_failure(0, 0, 3)  # the watch saw URL 0 fail: on to 1
    assert current == 1
    assert replicas.after_failure(current, 0, 3) == 1  # the heartbeat saw it too: stays on 1
    assert replicas.after_failure(2, 2, 3) == 0  # after the last, the first again


def test_no_further_url_once_the_budget_or_the_list_is_spent() -> None:
    assert replicas.another_try(5.0, 1, 2)
    assert not replicas.another_try(5.0, 2, 2)
    assert not replicas.another_try(0.1, 1, 2)


# --- the client on a fake transport -------------------------------------------------------
class Fake:
    """Answers by URL port: an HttpFailure, or a status with the controller's body."""

    def __init__(self, answers: dict[int, Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[int, str, float]] = []
        self.lock = threading.Lock()

    def __call__(
        self, target: Target, method: str, path: str, headers: dict[str, str], *rest: Any
    ) -> Reply:
        with self.lock:
            self.calls.append((target.port, headers.get("Authorization", ""), rest[1]))
        answer = self.answers[target.port]
        if isinstance(answer, Exception):
            raise answer
        if answer == 200:
            return Reply(200, {"protocol": PROTOCOL, "host": "n1", "state": "active"})
        body = {"protocol": PROTOCOL, "error": "unknown_credential", "message": "who?"}
        return Reply(answer, body, retry_after=7.0 if answer == 503 else None)


def client(fake: Fake, *urls: str) -> ControllerClient:
    config = ControllerConfig(urls[0], timeout=5.0, other_urls=urls[1:])
    made = ControllerClient(config, ME, send=fake)
    made.credential = HostCredential("n1", "i-1", urls[0], 1, "cred-1")
    return made


def test_a_refused_connection_moves_on_with_the_same_credential_and_stays() -> None:
    fake = Fake({7001: HttpFailure("connection refused"), 7002: 200})
    ctl = client(fake, A, B)
    assert ctl.heartbeat({}).outcome is Outcome.ACCEPTED
    assert [(port, auth) for port, auth, _ in fake.calls] == [
        (7001, "Bearer cred-1"),
        (7002, "Bearer cred-1"),
    ]
    assert ctl.url == B
    fake.answers[7001] = 200  # the first one is back: no reason to go back to it
    ctl.heartbeat({})
    assert [port for port, _, _ in fake.calls[2:]] == [7002]


def test_a_503_moves_on_and_is_never_a_refusal() -> None:
    fake = Fake({7001: 503, 7002: 200})
    assert client(fake, A, B).join({}).outcome is Outcome.ACCEPTED
    everyone_busy = client(Fake({7001: 503, 7002: 503}), A, B).heartbeat({})
    assert everyone_busy.outcome is Outcome.RETRY and everyone_busy.retry_after == 7.0


def test_a_refusal_is_the_controllers_word_from_whichever_url_gave_it() -> None:
    fake = Fake({7001: 401, 7002: 200})
    answer = client(fake, A, B).heartbeat({})
    assert answer.outcome is Outcome.REFUSED and "unknown_credential" in answer.detail
    assert [port for port, _, _ in fake.calls] == [7001]  # the next one is not asked


def test_a_single_url_is_tried_once_as_before() -> None:
    fake = Fake({7001: HttpFailure("connection refused")})
    answer = client(fake, A).heartbeat({})
    assert answer.outcome is Outcome.RETRY and answer.detail == "connection refused"
    assert len(fake.calls) == 1


def test_the_next_url_gets_what_is_left_of_the_budget() -> None:
    fake = Fake({7001: HttpFailure("timed out"), 7002: HttpFailure("timed out"), 7003: 200})
    ctl = client(fake, A, B, C)
    assert ctl.heartbeat({}, timeout=4.0).outcome is Outcome.ACCEPTED
    budgets = [budget for _, _, budget in fake.calls]
    assert budgets[0] == 4.0 and budgets[0] >= budgets[1] >= budgets[2] > 3.0


def test_a_cut_request_is_not_tried_elsewhere() -> None:
    ctl: ControllerClient

    def cut(*args: Any) -> Reply:
        ctl.close()  # the link stops (or replaces a stuck thread) while this one is out
        raise HttpFailure("connection reset")

    ctl = ControllerClient(ControllerConfig(A, other_urls=(B,)), ME, send=cut)
    assert ctl.heartbeat({}).outcome is Outcome.RETRY
    assert ctl.url == A


def _moves(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "could not serve" in r.getMessage()]


def test_a_move_is_logged_once_naming_the_urls_that_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("WARNING", logger="xce_agent.controller.client")
    fake = Fake({7001: HttpFailure("connection refused"), 7002: 503, 7003: 200})
    ctl = client(fake, A, B, C)
    assert ctl.heartbeat({}).outcome is Outcome.ACCEPTED
    assert ctl.heartbeat({}).outcome is Outcome.ACCEPTED  # answered where it now is: no line
    assert _moves(caplog) == [f"controller: now at {C} ({A}, {B} could not serve)"]


def test_a_late_answer_from_a_url_already_left_is_no_move(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A watch out at A while a heartbeat found A down and moved on to B: the watch's answer
    # from A came later and was logged as a move to A "(B could not serve)"; B never failed.
    caplog.set_level("WARNING", logger="xce_agent.controller.client")
    ctl: ControllerClient
    beats: list[Any] = []
    watching = threading.Event()

    def send(target: Target, *args: Any) -> Reply:
        if target.port == 7001 and not watching.is_set():  # the watch, at A: meanwhile a
            watching.set()  # heartbeat finds A down
            fake.answers[7001] = HttpFailure("connection refused")
            beats.append(ctl.heartbeat({}))
            return Reply(200, {"protocol": PROTOCOL, "host": "n1", "state": "active"})
        return fake(target, *args)

    fake = Fake({7001: 200, 7002: 200})
    ctl = ControllerClient(ControllerConfig(A, timeout=5.0, other_urls=(B,)), ME, send=send)
    ctl.credential = HostCredential("n1", "i-1", A, 1, "cred-1")
    assert ctl.watch(0, 1.0).outcome is Outcome.ACCEPTED
    assert beats[0].outcome is Outcome.ACCEPTED and [p for p, _, _ in fake.calls] == [7001, 7002]
    assert ctl.heartbeat({}).outcome is Outcome.ACCEPTED  # at B still
    assert ctl.url == B
    assert _moves(caplog) == [f"controller: now at {B} ({A} could not serve)"]


# --- the config ---------------------------------------------------------------------------
def test_a_list_of_urls_is_the_controllers_replicas_in_order(tmp_path: Path) -> None:
    text = minimal(top="controller:\n  url:\n    - https://c1.example/\n    - https://c2:8443\n")
    config = load_config(write(tmp_path, text))
    assert config.controller is not None
    assert config.controller.urls == ("https://c1.example", "https://c2:8443")
    assert config.controller.url == "https://c1.example"
    one = load_config(write(tmp_path, minimal(top="controller:\n  url: https://c1/\n")))
    assert one.controller is not None and one.controller.urls == ("https://c1",)


@pytest.mark.parametrize(
    ("urls", "problem"),
    [
        (
            "\n    - https://c1\n    - http://10.0.0.2:7870\n",
            "controller.url[1]: expected an https:// URL (http:// only to loopback, or with "
            "plain_http: true), got 'http://10.0.0.2:7870' (F line 12)",
        ),
        (
            "\n    - https://c1\n    - 'http://x\\@127.0.0.1'\n",
            "controller.url[1]: expected an http:// or https:// URL, got 'http://x\\\\@127.0.0.1' "
            "(F line 12)",
        ),
        (
            "\n    - https://c1\n    - https://c1\n",
            "controller.url[1]: expected a URL not listed before, got 'https://c1' (F line 10)",
        ),
        (" []\n", "controller.url: expected a list of 1 to 16 URLs, got 0 entries (F line 10)"),
        (
            " https://c1,https://c2\n",
            "controller.url: expected an http:// or https:// URL, got 'https://c1,https://c2' "
            "(several URLs are written as a YAML list) (F line 10)",
        ),
        (
            "\n    - https://c1\n    - {a: 1}\n",
            "controller.url[1]: expected an http:// or https:// URL, got a mapping (F line 12)",
        ),
    ],
)
def test_every_entry_follows_the_rules_of_one_url(tmp_path: Path, urls: str, problem: str) -> None:
    assert problems(tmp_path, minimal(top=f"controller:\n  url:{urls}")) == [problem]


def test_plain_http_applies_to_every_entry(tmp_path: Path) -> None:
    urls = "    - http://10.0.0.1:7870\n    - http://10.0.0.2:7870\n"
    text = minimal(top=f"controller:\n  plain_http: true\n  url:\n{urls}")
    config = load_config(write(tmp_path, text))
    assert config.controller is not None and len(config.controller.urls) == 2


def test_the_credential_is_kept_while_the_list_still_names_its_url(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path)
    store.save(HostCredential("n1", "i-1", A, 3, "s3cret"))
    assert store.load("n1", "i-1", (A, B)) is not None
    assert store.load("n1", "i-1", (B, A)) is not None  # reordered: the same cluster
    assert store.load("n1", "i-1", (B, C)) is None  # another controller: join afresh


# --- cloud-init user data -----------------------------------------------------------------
def test_user_data_takes_the_replicas_as_a_comma_separated_list(tmp_path: Path) -> None:
    from tests.unit.test_error_exits import _runner
    from xce_agent.cli import main as agent_main
    from xce_agent.operator.userdata import UserData, agent_config

    config = agent_config(UserData(controller_url="https://c1:8443,https://c2:8443"))
    assert config["controller"] == {"url": ["https://c1:8443", "https://c2:8443"]}
    assert agent_config(UserData(controller_url="https://c1"))["controller"] == {
        "url": "https://c1"
    }
    args = ["render-user-data", "--controller-url", "https://c1,http://10.0.0.2:7870"]
    refused = _runner().invoke(agent_main, args)
    assert refused.exit_code == 2 and "'http://10.0.0.2:7870'" in refused.stderr
    token = tmp_path / "token"
    token.write_text("a-join-token\n")
    urls = ["--controller-url", "https://c1,https://c2/", "--token-file", str(token)]
    rendered = _runner().invoke(agent_main, ["render-user-data", *urls])
    assert rendered.exit_code == 0 and "- https://c2\n" in rendered.stdout
