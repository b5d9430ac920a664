"""The agent's side of host identity: the stored credential and the transport it travels on."""

from __future__ import annotations

from pathlib import Path

import pytest
import urllib3

from tests.unit.test_config import minimal, problems, write
from xce_agent.config.agent import load_config, loopback_url
from xce_agent.controller.credential import CredentialStore, HostCredential, from_answer
from xce_protocol.errors import ConfigError


def test_the_credential_is_kept_0600_and_only_for_its_own_identity(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path)
    assert store.load("n1", "i-1", ("https://ctl",)) is None
    store.save(HostCredential("n1", "i-1", "https://ctl", 3, "s3cret"))
    assert store.path.stat().st_mode & 0o777 == 0o600
    cred = store.load("n1", "i-1", ("https://ctl",))
    assert cred is not None and cred.secret == "s3cret" and cred.incarnation == 3
    assert "s3cret" not in repr(cred)
    for other in (
        ("n2", "i-1", ("https://ctl",)),
        ("n1", "i-2", ("https://ctl",)),
        ("n1", "i-1", ("x",)),
    ):
        assert store.load(*other) is None
    store.path.write_text("{not json")
    assert store.load("n1", "i-1", ("https://ctl",)) is None  # unreadable: join afresh
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


@pytest.mark.parametrize(
    "url",
    [
        "http://ctl.example\\@127.0.0.1:7870",  # urllib.parse: 127.0.0.1; requests: ctl.example
        "http://ctl.example\\@localhost/",
        "http://ctl.example@127.0.0.1/",
        "http://127.0.0.1?@ctl.example/",
    ],
)
def test_a_url_read_as_loopback_by_one_parser_only_is_refused(tmp_path: Path, url: str) -> None:
    text = minimal(top=f"controller:\n  url: '{url}'\n")
    assert problems(tmp_path, text) == [
        f"controller.url: expected an http:// or https:// URL, got {url!r} (F line 10)"
    ]
    assert not loopback_url(url)
    # What the client would have done with the first one: sent the token to another host.
    assert urllib3.util.parse_url("http://ctl.example\\@127.0.0.1:7870").host == "ctl.example"


@pytest.mark.parametrize(
    "token",
    ['"tok\\n"', '"two words"', '"\\u20acuro-0123456789"', '"tab\\there"', '"\\ufefftok"'],
)
def test_a_token_that_cannot_travel_in_a_header_is_a_config_error(
    tmp_path: Path, token: str
) -> None:
    """Before, it validated and the agent reported `controller unreachable
    (UnicodeEncodeError)` (or InvalidHeader) at every join, for ever."""
    text = minimal(top=f"controller:\n  url: https://ctl\n  token: {token}\n")
    found = problems(tmp_path, text)
    assert found == [
        "controller.token: expected a token of printable ASCII characters without spaces, "
        "got a token with spaces, control or non-ASCII characters (F line 11)"
    ]
    secret = tmp_path / "join-token"
    secret.write_bytes("\ufeffs3cret-from-a-windows-editor\r\n".encode())
    text = minimal(top=f"controller:\n  url: https://ctl\n  token_file: {secret}\n")
    found = problems(tmp_path, text)
    assert [p.split(":")[0] for p in found] == ["controller.token_file"]
    assert "s3cret" not in found[0]  # never shown
    secret.write_text("s3cret-0123456789\r\n")  # a final CRLF is only whitespace
    config = load_config(write(tmp_path, text))
    assert config.controller is not None and config.controller.token == "s3cret-0123456789"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            'host_name: "node1\\n"',
            "instance.host_name: expected a host name (letters, digits, . -), got 'node1\\n'",
        ),
        (
            "host_name: " + "a." * 127 + "ab",
            "instance.host_name: expected a host name of at most 253 characters, "
            "got 256 characters",
        ),
        (
            'template: "gpu\\n"',
            "instance.template: expected a template name (letters, digits, . _ -), got 'gpu\\n'",
        ),
    ],
)
def test_names_the_controller_refuses_are_config_errors(
    tmp_path: Path, line: str, message: str
) -> None:
    """A trailing newline passed `re.match` with `$`; the controller then refused every join
    with 422, for ever."""
    text = minimal().replace("  id: i-1\n", f"  id: i-1\n  {line}\n")
    assert [p.rsplit(" (F line", 1)[0] for p in problems(tmp_path, text)] == [message]


@pytest.mark.parametrize("ident", ['"i-1\\n"', "i-1/2", "'i 1'", "'i:1'", "'%2F'"])
def test_instance_ids_the_controller_refuses_are_config_errors(tmp_path: Path, ident: str) -> None:
    text = minimal().replace("  id: i-1\n", f"  id: {ident}\n")
    assert [p.split(":")[0] for p in problems(tmp_path, text)] == ["instance.id"]
    data = tmp_path / "instance-data.json"
    data.write_text('{"v1": {"instance_id": "i-1/../2"}}')
    auto = minimal().replace("  id: i-1\n", "  id: auto\n")
    path = write(tmp_path, auto)
    with pytest.raises(ConfigError) as info:
        load_config(path, instance_data=data)
    assert info.value.problems == [
        "instance.id: expected an instance id (letters, digits, _ . -), "
        f"got 'i-1/../2' ({path} line 3)"
    ]


@pytest.mark.parametrize(
    "secret, worker",
    [("abc\r\nX-Forged: 1", ""), ("abc def", ""), ("x" * 600, ""), ("ok", "w\nx"), ("", "")],
)
def test_a_stored_credential_that_cannot_be_sent_is_dropped(
    tmp_path: Path, secret: str, worker: str
) -> None:
    """Kept, it made every request fail inside the agent, across restarts: deaf for good."""
    store = CredentialStore(tmp_path)
    store.save(HostCredential("n1", "i-1", "https://ctl", 3, secret, worker))
    assert store.peek() is not None  # the input arrived
    assert store.load("n1", "i-1", ("https://ctl",)) is None
    assert not store.path.exists()  # the agent joins again with its join token
    store.save(HostCredential("n1", "i-1", "https://ctl", 4, "good", "worker-good"))
    assert store.load("n1", "i-1", ("https://ctl",)) is not None


def test_unusable_names_what_an_answer_issues_wrong() -> None:
    from xce_agent.controller.credential import unusable

    good = {"credential": "c-1", "worker_credential": "w-1"}
    assert unusable(good, joining=True) == ""
    assert unusable({}, joining=False) == ""  # a renewal may issue nothing new
    assert unusable({"credential": "c-1"}, joining=True) == "without a worker credential"
    assert "credential that is not printable ASCII" in unusable(
        {**good, "credential": "a\r\nb"}, joining=False
    )
    assert "worker credential that is not" in unusable(
        {**good, "worker_credential": 7}, joining=True
    )
    assert from_answer({"credential": "a b"}, "n1", "i-1", "u") is None
