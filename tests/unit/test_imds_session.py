"""The IMDSv2 token: asked once, renewed before it expires, renewed on a 401, never skipped."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from xce_agent.notices import aws
from xce_agent.notices.fetch import Reply
from xce_agent.notices.observed import MetadataGarbage
from xce_agent.notices.sources import TOKEN_REFRESH, ImdsSession


class FakeImds:
    def __init__(self, ttl: str = "3600", put_status: int = 200) -> None:
        self.ttl = ttl
        self.put_status = put_status
        self.calls: list[tuple[str, str, dict[str, str]]] = []
        self.tokens = 0
        self.refuse: set[str] = set()

    def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        timeout: float,
        body: bytes | None = None,
    ) -> Reply:
        self.calls.append((method, url, dict(headers)))
        if method == "PUT":
            self.tokens += 1
            return Reply(
                self.put_status,
                f"token-{self.tokens}".encode(),
                {aws.TOKEN_TTL_HEADER.lower(): self.ttl},
            )
        if headers.get(aws.TOKEN_HEADER) in self.refuse or not headers.get(aws.TOKEN_HEADER):
            return Reply(401, b"")
        return Reply(404, b"")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def puts(fake: FakeImds) -> list[dict[str, str]]:
    return [h for m, _, h in fake.calls if m == "PUT"]


def test_token_is_asked_with_a_ttl_and_reused() -> None:
    fake, clock = FakeImds(), Clock()
    session = ImdsSession(fake, "http://imds", clock)
    for _ in range(5):
        assert session.get(aws.SPOT_PATH).status == 404
    assert puts(fake) == [{aws.TOKEN_TTL_HEADER: str(aws.TOKEN_TTL)}]
    assert fake.calls[0][1] == "http://imds/latest/api/token"
    assert {h[aws.TOKEN_HEADER] for m, _, h in fake.calls if m == "GET"} == {"token-1"}


def test_token_is_renewed_before_it_expires() -> None:
    fake, clock = FakeImds(ttl="300"), Clock()
    session = ImdsSession(fake, "http://imds", clock)
    session.get(aws.SPOT_PATH)
    clock.now += 300 - TOKEN_REFRESH - 1
    session.get(aws.SPOT_PATH)
    assert len(puts(fake)) == 1
    clock.now += 2  # inside the refresh margin: a new token before the old one lapses
    session.get(aws.SPOT_PATH)
    assert len(puts(fake)) == 2
    assert not any(r.status == 401 for r in [session.get(aws.SPOT_PATH)])


def test_a_401_gets_one_fresh_token() -> None:
    fake = FakeImds()
    session = ImdsSession(fake, "http://imds", Clock())
    session.get(aws.SPOT_PATH)
    fake.refuse.add("token-1")
    assert session.get(aws.SPOT_PATH).status == 404
    assert len(puts(fake)) == 2


@pytest.mark.parametrize("status", [400, 403, 404, 500])
def test_a_refused_token_is_an_error_never_an_unauthenticated_read(status: int) -> None:
    fake = FakeImds(put_status=status)
    session = ImdsSession(fake, "http://imds", Clock())
    with pytest.raises(MetadataGarbage, match=f"HTTP {status}"):
        session.get(aws.SPOT_PATH)
    assert [m for m, _, _ in fake.calls] == ["PUT"]


@pytest.mark.parametrize("token", [b"abc\r\nX-Injected: 1", b"two words", b"caf\xc3\xa9"])
def test_a_token_no_header_can_carry_is_refused_not_kept(token: bytes) -> None:
    class BadToken(FakeImds):
        def request(
            self,
            method: str,
            url: str,
            headers: Mapping[str, str],
            timeout: float,
            body: bytes | None = None,
        ) -> Reply:
            if method == "PUT":
                self.calls.append((method, url, dict(headers)))
                return Reply(200, token, {})
            return super().request(method, url, headers, timeout, body)

    imds = BadToken()
    session = ImdsSession(imds, "http://imds", Clock())
    for _ in range(2):  # asked again each time: a refused token is not cached
        with pytest.raises(MetadataGarbage, match="printable ASCII"):
            session.get(aws.SPOT_PATH)
    assert [c[0] for c in imds.calls] == ["PUT", "PUT"]
