"""`GET /healthz`, the load balancer's check: 200 while serving (with the store's state),
503 once the controller is stopping; no token, no store access."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_authorization import World
from xce_protocol.protocol import PROTOCOL


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()


def test_healthz_is_ok_while_serving_and_says_how_the_store_is(world: World) -> None:
    answer = world.call("get", "/healthz", None, None)
    assert answer.status_code == 200
    assert answer.json() == {"protocol": PROTOCOL, "status": "ok", "storage": "ok"}
    world.ctl.storage_down = "database or disk is full"  # as a failed commit leaves it
    answer = world.call("get", "/healthz", None, None)
    assert answer.status_code == 200 and answer.json()["storage"] == "unavailable"
    assert "disk" not in answer.text  # the cause is for the log, not for anyone asking


def test_healthz_says_503_once_the_controller_is_stopping(world: World) -> None:
    async def stop() -> None:
        world.ctl.start()
        world.ctl.release_watchers()  # what the server does when told to stop
        await asyncio.sleep(0)  # the release runs on the loop, at its next turn
        await world.ctl.stop()

    asyncio.run(stop())
    answer = world.call("get", "/healthz", None, None)
    assert answer.status_code == 503 and answer.json()["status"] == "stopping"
