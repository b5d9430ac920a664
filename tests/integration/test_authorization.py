"""The authorization matrix, generated from the OpenAPI document: every operation is called
with every kind of bearer, and the exact answer is asserted.

An operation names the bearers it takes in its `security` (JoinToken, HostCredential,
ProvisionerToken, AdminToken, ReadToken; none: public). The read-only token also reads every
admin or provisioner GET, and the endpoints outside the document (/metrics, the status page)
are in the matrix too. A new operation is covered as soon as it exists:
it needs a valid request in REQUESTS and its security must be one of the classes in ANSWERS,
or this test fails.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from xce_controller.core.config import load_cluster_config
from xce_controller.http.api import create_app
from xce_controller.service import Controller
from xce_controller.store.open import open_store
from xce_controller.store.sqlite import Store

ADMIN, PROVISIONER, JOIN = "admin-token-0123456789", "prov-token-0123456789", "join-token-0123"
READ = "read-token-0123456789"
CONFIG = f"""\
version: 1
auth:
  admin_token: {ADMIN}
  provisioner_token: {PROVISIONER}
  join_token: {JOIN}
  read_token: {READ}
templates:
  default: {{slots: 2}}
"""
BEARERS = (
    "none",
    "wrong",
    "join token",
    "other host",
    "stale",
    "provisioner",
    "admin",
    "read",
    "own",
    "own worker",
    "other worker",
    "stale worker",
)

# A valid request of each operation, in a world where h1 (unprovisioned, joined twice from
# boot b1: its first credential is stale), h2 and i-3 (decommissioned, to be returned) exist.
REQUESTS: dict[tuple[str, str], tuple[str, dict[str, Any] | None]] = {
    ("get", "/v1/info"): ("/v1/info", None),
    ("get", "/healthz"): ("/healthz", None),
    ("post", "/v1/join"): ("/v1/join", {"host": "h1", "boot_id": "b-other"}),
    ("post", "/v1/hosts/{name}/heartbeat"): ("/v1/hosts/h1/heartbeat", {"agent_state": "running"}),
    ("get", "/v1/hosts/{name}/watch"): ("/v1/hosts/h1/watch?timeout=0", None),
    ("post", "/v1/hosts/{name}/notice"): ("/v1/hosts/h1/notice", {"kind": "rebalance"}),
    ("post", "/v1/hosts/{name}/jobs/{job_id}/{event}"): ("/v1/hosts/h1/jobs/1/started", {}),
    ("get", "/v1/expected"): ("/v1/expected", None),
    ("post", "/v1/expected"): ("/v1/expected", {"instance_id": "i-9", "template": "default"}),
    ("get", "/v1/to-return"): ("/v1/to-return", None),
    ("post", "/v1/to-return/{instance_id}/ack"): ("/v1/to-return/i-3/ack", None),
    ("get", "/v1/provisioned"): ("/v1/provisioned", None),
    ("post", "/v1/provisioned/{instance_id}/decommission"): (
        "/v1/provisioned/i-8/decommission",
        {},
    ),
    ("post", "/v1/provisioned/{instance_id}/power"): (
        "/v1/provisioned/i-3/power",
        {"decision": "decommissioned@1.0", "action": "shutdown", "phase": "begun"},
    ),
    ("get", "/v1/hosts"): ("/v1/hosts", None),
    ("get", "/v1/hosts/{name}"): ("/v1/hosts/h1", None),
    ("post", "/v1/hosts/{name}/open"): ("/v1/hosts/h1/open", {}),
    ("post", "/v1/hosts/{name}/close"): ("/v1/hosts/h1/close", {}),
    ("post", "/v1/hosts/{name}/decommission"): ("/v1/hosts/h1/decommission", {}),
    ("get", "/v1/jobs"): ("/v1/jobs", None),
    ("post", "/v1/leases/{lease}"): ("/v1/leases/prov", {"host": "h1", "session": "s1", "ttl": 5}),
    ("delete", "/v1/leases/{lease}"): ("/v1/leases/prov?host=h1&session=s1", None),
    ("get", "/v1/leases"): ("/v1/leases", None),
    ("post", "/v1/join-timeout"): ("/v1/join-timeout", {"host": "h8", "instance_id": "i-8"}),
    ("post", "/v1/jobs"): ("/v1/jobs", {"command": ["true"]}),
    ("post", "/v1/jobs/{job_id}/cancel"): ("/v1/jobs/1/cancel", None),
    ("get", "/v1/templates"): ("/v1/templates", None),
    ("get", "/v1/events"): ("/v1/events", None),
}

UNAUTHORIZED = (401, "unauthorized")
UNKNOWN = (401, "unknown_credential")
STALE = (409, "stale_incarnation")
OK = (200, None)
REFUSED = frozenset({401, 403})  # a refused caller changes nothing
# The answer of each class of operation (by its security) to each bearer.
ANSWERS: dict[tuple[str, ...], dict[str, tuple[int, str | None]]] = {
    (): dict.fromkeys(BEARERS, OK),
    ("AdminToken",): {
        **dict.fromkeys(BEARERS, UNAUTHORIZED),
        "provisioner": (403, "forbidden"),
        "admin": OK,
    },
    ("AdminToken", "ProvisionerToken"): {
        **dict.fromkeys(BEARERS, UNAUTHORIZED),
        "provisioner": OK,
        "admin": OK,
    },
    ("HostCredential",): {
        **dict.fromkeys(BEARERS, UNKNOWN),
        "none": UNAUTHORIZED,
        "stale": STALE,
        "own": OK,
    },
    ("HostCredential", "WorkerCredential"): {
        **dict.fromkeys(BEARERS, UNKNOWN),
        "none": UNAUTHORIZED,
        "stale": STALE,
        "own": OK,
        "own worker": OK,
    },
    ("AdminToken", "ReadToken"): {
        **dict.fromkeys(BEARERS, UNAUTHORIZED),
        "provisioner": (403, "forbidden"),
        "admin": OK,
        "read": OK,
    },
    ("AdminToken", "ProvisionerToken", "ReadToken"): {
        **dict.fromkeys(BEARERS, UNAUTHORIZED),
        "provisioner": OK,
        "admin": OK,
        "read": OK,
    },
    ("HostCredential", "JoinToken"): {
        **dict.fromkeys(BEARERS, UNAUTHORIZED),
        "join token": (409, "already_joined"),  # h1 joined before, from another boot
        "stale": STALE,
        "own": OK,
    },
}
ANSWERS[("JoinToken",)] = {**dict.fromkeys(BEARERS, UNAUTHORIZED), "join token": OK}
CREATED = {("post", "/v1/expected"), ("post", "/v1/jobs")}


def expected(method: str, schemes: tuple[str, ...], bearer: str) -> tuple[int, str | None]:
    # The read token reads exactly where the document names it (it named it nowhere but
    # /v1/events, though six GETs took it).
    return ANSWERS[schemes][bearer]


# Outside the OpenAPI document: the metrics scrape and the status page (which sends a caller
# without a viewer's token to its login form).
VIEWED = {"admin", "read"}
OUTSIDE = {
    "/metrics": (401, "unauthorized"),
    "/ui": (303, None),
    "/ui/hosts/h1": (303, None),
}


class World:
    def __init__(self, tmp: Path, db: str = "") -> None:
        cfg_path = tmp / "cluster.yaml"
        cfg_path.write_text(CONFIG)
        store = open_store(db) if db else Store(tmp / "db")
        self.ctl = Controller(load_cluster_config(cfg_path), store)
        self.app = create_app(self.ctl)
        stale = self.join("h1", JOIN)
        stale_worker = self.worker  # replaced by the next join of h1
        self.credential = self.join("h1", stale)
        worker = self.worker
        self.bearers = {
            "none": None,
            "wrong": "not-a-credential",
            "join token": JOIN,
            "other host": self.join("h2", JOIN),
            "stale": stale,
            "provisioner": PROVISIONER,
            "admin": ADMIN,
            "read": READ,
            "own": self.credential,
            "own worker": worker,
            "other worker": self.worker,  # h2's, from its join above
            "stale worker": stale_worker,
        }
        expect = {"instance_id": "i-3", "template": "default", "expected_name": "h3"}
        self.call("post", "/v1/expected", expect, ADMIN)
        self.call("post", "/v1/hosts/h3/decommission", {}, ADMIN)
        waiting = {"instance_id": "i-8", "template": "default", "expected_name": "h8"}
        self.call("post", "/v1/expected", waiting, ADMIN)  # its agent may give up joining
        self.call("post", "/v1/hosts/h2/close", {}, ADMIN)
        job = self.call("post", "/v1/jobs", {"command": ["sleep", "1"], "host": "h1"}, ADMIN)
        assert job.status_code == 201 and job.json()["assigned"] == "host:h1", job.text

    def join(self, name: str, bearer: str) -> str:
        r = self.call("post", "/v1/join", {"host": name, "boot_id": "b1"}, bearer)
        assert r.status_code == 200, r.text
        credential: str = r.json()["credential"]
        self.worker: str = r.json()["worker_credential"]
        return credential

    def call(
        self, method: str, path: str, body: dict[str, Any] | None, bearer: str | None
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}

        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, client=("192.0.2.7", 40000))
            async with httpx.AsyncClient(transport=transport, base_url="http://ctl") as client:
                return await client.request(
                    method.upper(), path, json=body, headers=headers, follow_redirects=False
                )

        return asyncio.run(go())

    def close(self) -> None:
        self.ctl.store.close()


def operations() -> list[tuple[str, str, tuple[str, ...]]]:
    with tempfile.TemporaryDirectory() as tmp:
        world = World(Path(tmp))
        doc = world.call("get", "/openapi.json", None, None).json()
        world.close()
    found = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            schemes = tuple(sorted(name for alt in op.get("security", []) for name in alt))
            found.append((method, path, schemes))
    return found


OPERATIONS = operations()


# On PostgreSQL the matrix runs with the bearers that reach each operation's store path
# (every kind of answer but the refusals, which are decided before any store is touched,
# and stale_incarnation, which stores a fact): the whole matrix there took 5 minutes.
PG_BEARERS = ("own", "admin", "provisioner", "stale", "own worker")
BACKENDS = [
    *[("sqlite", b) for b in BEARERS],
    *[("postgres", b) for b in PG_BEARERS],
]


def _built(tmp: Path, backend: str, request: pytest.FixtureRequest) -> World:
    return World(tmp, request.getfixturevalue("pg").database() if backend == "postgres" else "")


@pytest.fixture(scope="module")
def refused_worlds() -> Iterator[dict[str, World]]:
    shared: dict[str, World] = {}
    yield shared
    for w in shared.values():
        w.close()


@pytest.fixture
def world(
    tmp_path: Path,
    backend: str,
    request: pytest.FixtureRequest,
    refused_worlds: dict[str, World],
) -> Iterator[World]:
    """A world of its own; a matrix case whose caller is refused (401, 403) shares one per
    backend, built once (three in four cases; each world costs about 0.1 s, the app's
    routes): a refused call changes nothing, and each such case asserts that it did not."""
    params = request.node.callspec.params
    if "schemes" in params:
        status, _ = expected(params["method"], params["schemes"], params["bearer"])
        if status in REFUSED:
            if backend not in refused_worlds:
                refused_worlds[backend] = _built(tmp_path, backend, request)
            yield refused_worlds[backend]
            return
    w = _built(tmp_path, backend, request)
    yield w
    w.close()


def test_every_operation_is_in_the_matrix() -> None:
    assert len(OPERATIONS) >= 16
    for method, path, schemes in OPERATIONS:
        assert (method, path) in REQUESTS, f"add a valid request for {method} {path}"
        assert schemes in ANSWERS, f"{method} {path}: unknown security {schemes}"
    public = [(m, p) for m, p, s in OPERATIONS if not s]
    # /healthz: a load balancer checks it every second without a token; it tells nothing.
    assert sorted(public) == [("get", "/healthz"), ("get", "/v1/info")], (
        "a new public operation needs a reason"
    )


@pytest.mark.parametrize(("backend", "bearer"), BACKENDS)
@pytest.mark.parametrize(("method", "path", "schemes"), OPERATIONS)
def test_authorization_matrix(
    world: World, method: str, path: str, schemes: tuple[str, ...], bearer: str
) -> None:
    url, body = REQUESTS[(method, path)]
    before = len(world.ctl.store.facts())
    answer = world.call(method, url, body, world.bearers[bearer])
    status, kind = expected(method, schemes, bearer)
    if status == 200 and (method, path) in CREATED:
        status = 201
    got = answer.json().get("error") if answer.status_code >= 400 else None
    assert (answer.status_code, got) == (status, kind), answer.text
    if status in REFUSED:
        assert len(world.ctl.store.facts()) == before
    if kind == "stale_incarnation":  # recorded as a fact, and the host still works
        assert world.ctl.store.facts()[-1].kind == "refused"
        ok = world.call("post", "/v1/hosts/h1/heartbeat", {}, world.credential)
        assert ok.status_code == 200


@pytest.mark.parametrize(("backend", "bearer"), BACKENDS)
@pytest.mark.parametrize("path", sorted(OUTSIDE))
def test_metrics_and_the_status_page_take_the_admin_or_read_token(
    world: World, path: str, bearer: str
) -> None:
    before = len(world.ctl.store.facts())
    answer = world.call("get", path, None, world.bearers[bearer])
    if bearer in VIEWED:
        assert answer.status_code == 200, answer.text
        assert ("xce_controller_hosts" if path == "/metrics" else "h1") in answer.text
        return
    status, kind = OUTSIDE[path]
    if path == "/metrics" and bearer == "provisioner":
        # As on /v1/events and every other read (before: 401 here, 403 there).
        status, kind = 403, "forbidden"
    assert answer.status_code == status, answer.text
    if kind:
        assert answer.json()["error"] == kind
    else:
        assert answer.headers["location"] == "/ui/login"
    assert len(world.ctl.store.facts()) == before
