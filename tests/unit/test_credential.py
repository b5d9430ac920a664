"""The agent's side of host identity: the stored credential and the transport it travels on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_config import minimal, problems, write
from xce_agent.config import load_config
from xce_agent.credential import CredentialStore, HostCredential, from_answer


def test_the_credential_is_kept_0600_and_only_for_its_own_identity(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path)
    assert store.load("n1", "i-1", "https://ctl") is None
    store.save(HostCredential("n1", "i-1", "https://ctl", 3, "s3cret"))
    assert store.path.stat().st_mode & 0o777 == 0o600
    cred = store.load("n1", "i-1", "https://ctl")
    assert cred is not None and cred.secret == "s3cret" and cred.incarnation == 3
    assert "s3cret" not in repr(cred)
    for other in (("n2", "i-1", "https://ctl"), ("n1", "i-2", "https://ctl"), ("n1", "i-1", "x")):
        assert store.load(*other) is None
    store.path.write_text("{not json")
    assert store.load("n1", "i-1", "https://ctl") is None  # unreadable: join afresh
    store.clear()
    store.clear()
    assert not store.path.exists()


def test_a_join_answer_without_a_credential_issues_none() -> None:
    assert from_answer({"protocol": "1.0"}, "n1", "i-1", "u") is None
    assert from_answer({"credential": 5}, "n1", "i-1", "u") is None
    assert from_answer({"credential": "x" * 600}, "n1", "i-1", "u") is None
    body = {"credential": "c", "worker_credential": "w", "incarnation": 2}
    cred = from_answer(body, "n1", "i-1", "u")
    assert cred == HostCredential("n1", "i-1", "u", 2, "c", "w")
    renewed = from_answer({"credential": "c2", "incarnation": 3}, "n1", "i-1", "u", cred)
    assert renewed == HostCredential("n1", "i-1", "u", 3, "c2", "w")  # the worker's is kept


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:7870", "http://127.9.0.1", "http://[::1]:80", "http://localhost"]
)
def test_plain_http_to_loopback_is_allowed(tmp_path: Path, url: str) -> None:
    config = load_config(write(tmp_path, minimal(top=f"controller:\n  url: '{url}'\n")))
    assert config.controller is not None and config.controller.url == url


def test_plain_http_beyond_loopback_needs_the_explicit_key(tmp_path: Path) -> None:
    text = minimal(top="controller:\n  url: http://10.0.0.1:7870\n")
    assert problems(tmp_path, text) == [
        "controller.url: expected an https:// URL (http:// only to loopback, or with "
        "plain_http: true), got 'http://10.0.0.1:7870' (F line 10)"
    ]
    assert problems(tmp_path, text + "  plain_http: yes please\n") == [
        "controller.plain_http: expected true or false, got 'yes please' (F line 11)"
    ]
    opted = load_config(write(tmp_path, text + "  plain_http: true\n"))
    assert opted.controller is not None and opted.controller.url == "http://10.0.0.1:7870"
