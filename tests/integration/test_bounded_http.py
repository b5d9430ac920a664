"""One bounded request against a server on 127.0.0.1 that misbehaves on purpose."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Iterator

import pytest

from tests.integration.fake_controller import REFUSAL, Exchange, FakeController, gzip_bomb
from xce_agent.controller.bounded_http import (
    HttpFailure,
    Reply,
    Target,
    TimedOut,
    json_depth,
    parse_json,
    request,
)


def serve(write: Callable[[Exchange], None]) -> Iterator[FakeController]:
    server = FakeController(write, ("heartbeat",))
    server.set_phase("hostile")
    yield server
    server.close()


@pytest.fixture
def bomb_server() -> Iterator[FakeController]:
    data = gzip_bomb(64 << 20)
    yield from serve(lambda x: x.answer(200, data, {"Content-Encoding": "gzip"}))


@pytest.fixture
def drip_server() -> Iterator[FakeController]:
    yield from serve(lambda x: x.drip(b"HTTP/1.1 200 OK\r\nX-Slow: ", every=0.1))


@pytest.fixture
def redirect_server() -> Iterator[FakeController]:
    def write(x: Exchange) -> None:
        x.answer(307, REFUSAL, {"Location": "http://127.0.0.2:9/v1/elsewhere"})

    yield from serve(write)


def heartbeat(server: FakeController, budget: float = 2.0) -> Reply:
    path = "/v1/hosts/node1/heartbeat"
    return request(Target.from_url(server.url), "POST", path, {}, b"{}", budget)


def test_a_compression_bomb_is_cut_while_it_is_decoded(bomb_server: FakeController) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(HttpFailure, match="larger than 1048576 bytes"):
            heartbeat(bomb_server)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert bomb_server.count("hostile") == 1
    assert peak < 8 << 20, f"peak {peak} bytes for a 64 MiB bomb"


def test_a_dripping_server_is_cut_at_the_total_deadline(drip_server: FakeController) -> None:
    started = time.monotonic()
    with pytest.raises(TimedOut, match=r"within 1\.5s"):
        heartbeat(drip_server, budget=1.5)
    took = time.monotonic() - started
    assert drip_server.count("hostile") == 1
    assert 1.4 < took < 3.0, took


def test_a_redirect_is_returned_not_followed(redirect_server: FakeController) -> None:
    reply = heartbeat(redirect_server)
    assert reply.status == 307
    assert reply.location == "http://127.0.0.2:9/v1/elsewhere"
    assert redirect_server.count("hostile") == 1


def test_json_depth_counts_brackets_outside_strings_only() -> None:
    assert json_depth(b'{"a": "[[[[{{{{", "b": [1, {"c": []}]}') == 4
    assert json_depth(b'"\\"[[["') == 0
    assert parse_json(b"[" * 33 + b"]" * 33) is None
    assert parse_json(b"[" * 32 + b"]" * 32) is not None
    assert parse_json(b'{"x": NaN}') is None
    assert parse_json(b'{"x": Infinity}') is None
    assert parse_json(b"\xff") is None


def test_json_depth_is_linear_in_unterminated_strings() -> None:
    # Each quote of an unterminated string used to be rescanned to the end of the body: 64 KiB
    # of escaped quotes took about 15 s, 1 MiB an hour, with the interpreter lock held.
    body = b'"' + b'\\"' * (32 << 10)
    started = time.monotonic()
    assert json_depth(body) == 0
    assert parse_json(body) is None
    assert time.monotonic() - started < 1.0
    assert json_depth(b'"\\' + b"[" * 40) == 0  # an unterminated string hides nothing either
    assert parse_json(b'["a", "b\\"]"]') == ["a", 'b"]']


@pytest.fixture
def corrupt_gzip_server() -> Iterator[FakeController]:
    yield from serve(lambda x: x.answer(200, REFUSAL, {"Content-Encoding": "gzip"}))


def test_a_body_not_in_its_declared_encoding_is_a_failed_contact(
    corrupt_gzip_server: FakeController,
) -> None:
    # zlib's own error used to escape: a traceback in the log and a lost cycle of the link.
    with pytest.raises(HttpFailure, match="not in its declared content encoding"):
        heartbeat(corrupt_gzip_server)
    assert corrupt_gzip_server.count("hostile") == 1
