"""Two replicas on one PostgreSQL database; the first loses the database's answer to a job
submit's COMMIT (test_commit_outcome's proxy). The submit is stored, the first replica says
the outcome is unknown, and `xcecli` with both URLs neither sends it to the second nor exits
as if nothing happened: the job exists once."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.test_commit_outcome import CONFIG, MuteProxy, _recv, _send
from tests.pg_server import PgCluster
from tests.unit.test_error_exits import _one_line, _runner
from xce_controller.cli.xcecli import main as xcecli_main
from xce_controller.core.config import load_cluster_config
from xce_controller.http.server import EmbeddedController
from xce_controller.store.open import open_store


class Proxy(MuteProxy):
    """MuteProxy whose forwarding ends quietly when it is closed under a replica still
    probing its database (test_commit_outcome closes it after the store)."""

    def _up(self, client: socket.socket, server: socket.socket) -> None:
        while data := _recv(client):
            if self.armed and self.trigger in data:
                self.muted.set()
            _send(server, data)


def through(proxy: MuteProxy, pg: PgCluster, direct: str) -> str:
    """`direct`'s connection string with the proxy's address in place of the primary's."""
    rest = direct.replace(f"host={pg.primary.socket} port={pg.primary.port}", "")
    return f"host=127.0.0.1 port={proxy.port} {rest}"


@contextmanager
def proxied_pair(
    tmp_path: Path, pg: PgCluster, text: str
) -> Iterator[tuple[EmbeddedController, EmbeddedController, Proxy, str]]:
    """Two replicas on one database with the cluster config `text`: the first reaches it
    through a Proxy, the second directly (its connection string is the fourth value)."""
    direct = pg.database()
    proxy = Proxy(f"{pg.primary.socket}/.s.PGSQL.{pg.primary.port}")
    config = tmp_path / "c.yaml"
    config.write_text(text)
    cfg = load_cluster_config(config)
    first = EmbeddedController(cfg, through(proxy, pg, direct)).start()
    second = EmbeddedController(cfg, direct).start()
    try:
        yield first, second, proxy, direct
    finally:
        proxy.close()  # the muted connection fails at once: the first stops without waiting
        first.stop()
        second.stop()


@pytest.fixture
def two(
    tmp_path: Path, pg: PgCluster
) -> Iterator[tuple[EmbeddedController, EmbeddedController, Proxy, str]]:
    with proxied_pair(tmp_path, pg, CONFIG) as pair:
        yield pair


def test_a_submit_whose_commit_answer_was_lost_is_stored_once_and_said_so(
    two: tuple[EmbeddedController, EmbeddedController, Proxy, str],
) -> None:
    first, second, proxy, direct = two
    urls = ["--url", f"{first.url},{second.url}", "--token", "adm1n-t0ken"]
    assert _runner().invoke(xcecli_main, [*urls, "jobs"]).exit_code == 0  # both serve
    proxy.trigger, proxy.armed = b"COMMIT\x00", True
    began = time.monotonic()
    result = _runner().invoke(xcecli_main, [*urls, "submit", "--", "true"])
    took = time.monotonic() - began
    assert proxy.muted.is_set()  # the COMMIT went by, its answer held back
    assert result.exit_code == 4, result.output
    line = _one_line(result, "xcecli")
    assert f"{first.url} lost its database's answer to POST /v1/jobs" in line
    assert "`xcecli jobs`" in line
    # The check it names, at the other replica: the job was stored, once.
    listed = _runner().invoke(xcecli_main, ["--url", second.url, "--token", "adm1n-t0ken", "jobs"])
    assert listed.exit_code == 0, listed.output
    store = open_store(direct)
    try:
        submitted = [f for f in store.facts() if f.kind == "job_submitted"]
    finally:
        store.close()
    assert len(submitted) == 1, submitted
    print(f"outcome unknown answered after {took:.1f}s; jobs stored: {len(submitted)}")
