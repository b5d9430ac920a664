"""Who may join as which record and speak for it: tokens, credentials, incarnations, names."""

from __future__ import annotations

from dataclasses import replace

import pytest

from xce_controller.core import credentials, deadlines, joining
from xce_controller.core import lifecycle as lc
from xce_controller.core.config import ClusterConfig, Template
from xce_controller.core.facts import apply
from xce_controller.core.model import AdminAction, Cluster, Fact, HostState

CFG = ClusterConfig(
    templates={"default": Template("default", slots=2)},
    join_deadline=100.0,
    join_token="cluster-join-token",
)


class World:
    def __init__(self, cfg: ClusterConfig = CFG) -> None:
        self.cfg = cfg
        self.cluster = Cluster()
        self.now = 0.0

    def commit(self, facts: list[Fact]) -> None:
        for fact in facts:
            apply(self.cluster, fact)

    def expect(self, iid: str, name: str = "", token: str = "") -> None:
        self.commit(
            lc.expect(self.cluster, self.cfg, self.now, "prov", iid, "default", name, token=token)
        )

    def join(self, name: str, iid: str = "", token: str = CFG.join_token, boot: str = "b1") -> str:
        """Join and return the credential the answer would carry."""
        secret = credentials.mint()
        req = lc.JoinRequest(
            name=name, instance_id=iid, boot_id=boot, token=token, issue=credentials.seal(secret)
        )
        _, facts = joining.join(self.cluster, self.cfg, self.now, req)
        self.commit(facts)
        return secret

    def join_with(self, req: lc.JoinRequest) -> str:
        """Join with a request of the test's own (the cluster token and a new credential)."""
        secret = credentials.mint()
        full = replace(req, token=req.token or self.cfg.join_token, issue=credentials.seal(secret))
        _, facts = joining.join(self.cluster, self.cfg, self.now, full)
        self.commit(facts)
        return secret

    def refused(self, name: str, iid: str = "", **kw: str) -> lc.Refused:
        with pytest.raises(lc.Refused) as info:
            self.join(name, iid, **kw)
        self.commit(info.value.record)
        return info.value

    def speak(self, name: str, token: str) -> str:
        try:
            host, facts = joining.speaker(self.cluster, self.now, name, token)
            self.commit(facts)
            return host.key
        except lc.Refused as refused:
            self.commit(refused.record)
            return refused.kind

    def decommission(self, key: str) -> None:
        host = self.cluster.hosts[key]
        self.commit(
            lc.control(self.cluster, self.cfg, 0.0, "admin", host, AdminAction.DECOMMISSION)
        )
        if self.cluster.hosts[key].state is HostState.DRAINING:
            due = deadlines.host_due(self.cluster, self.cfg, 0.0, self.cluster.hosts[key], 0.0)
            self.commit(due)


def test_a_known_host_cannot_be_rejoined_without_a_token() -> None:
    w = World()
    w.join("u1")
    assert w.refused("u1", token="").kind == "unauthorized"
    assert w.refused("u1", token="wrong").kind == "unauthorized"
    assert w.cluster.hosts["host:u1"].boot_id == "b1"


def test_a_second_join_from_another_boot_needs_the_host_credential_and_is_recorded() -> None:
    w = World()
    w.expect("i-1", "n1", token="instance-token-0001")
    first = w.join("n1", "i-1", token="instance-token-0001")
    refusal = w.refused("n1", "i-1", token="instance-token-0001", boot="b2")
    assert (refusal.kind, refusal.status) == ("already_joined", 409)
    host = w.cluster.hosts["i-1"]
    assert host.refusals == 1 and "another boot" in host.last_refusal
    # The boot that tried is in the fact's own field (admin-only in the events), not its text.
    assert refusal.record[0].data["boot_id"] == "b2" and "b2" not in host.last_refusal
    assert w.join("n1", "i-1", token=first, boot="b2")  # the credential is the way back
    assert w.cluster.hosts["i-1"].incarnation == 2


def test_a_stale_incarnation_is_refused_distinguishably_and_recorded() -> None:
    w = World()
    old = w.join("n1")
    new = w.join("n1", token=old, boot="b2")
    assert w.speak("n1", new) == "host:n1"
    assert w.speak("n1", old) == "stale_incarnation"
    assert w.refused("n1", token=old).kind == "stale_incarnation"
    assert w.speak("n1", "nonsense") == "unknown_credential"
    assert w.speak("n1", CFG.join_token) == "unknown_credential"
    assert w.speak("n1", "") == "unauthorized"
    assert w.cluster.hosts["host:n1"].refusals == 2


def test_another_hosts_credential_is_unknown_here() -> None:
    w = World()
    mine = w.join("a1")
    w.join("b1")
    assert w.speak("b1", mine) == "unknown_credential"
    assert w.speak("a1", mine) == "host:a1"


def test_per_instance_token_expires_at_the_join_deadline() -> None:
    w = World()
    w.expect("i-1", "n1", token="instance-token-0001")
    w.now = 100.0
    assert w.refused("n1", "i-1", token="instance-token-0001").kind == "token_expired"
    assert w.refused("n1", "i-1").kind == "unauthorized"  # nor the cluster's token


@pytest.mark.parametrize(
    ("name", "iid"), [("d1", ""), ("d1", "i-d1"), ("other", "i-d1"), ("d1", "i-new")]
)
def test_a_decommissioned_provisioned_host_stays_out(name: str, iid: str) -> None:
    w = World()
    w.expect("i-d1", "d1")
    w.join("d1", "i-d1")
    w.decommission("i-d1")
    refusal = w.refused(name, iid)
    assert refusal.status in (409, 410) and "d1" in refusal.message
    assert all(h.state is HostState.DECOMMISSIONED for h in w.cluster.hosts.values())


@pytest.mark.parametrize(("name", "iid"), [("u2", ""), ("u2", "i-u2"), ("u3", "i-u2")])
def test_a_decommissioned_unprovisioned_host_stays_out(name: str, iid: str) -> None:
    w = World()
    w.join("u2", "i-u2")
    w.decommission("host:u2")
    refusal = w.refused(name, iid)
    assert refusal.status in (410, 422)
    assert list(w.cluster.hosts) == ["host:u2"]


def test_a_decommissioned_name_is_reused_only_by_an_expected_instance() -> None:
    w = World()
    w.join("d1")
    w.decommission("host:d1")
    w.expect("i-2")
    assert w.refused("d1", "i-2").kind == "name_decommissioned"
    w.expect("i-3", "d1")
    w.join("d1", "i-3")
    assert w.cluster.by_name("d1") == w.cluster.hosts["i-3"]


def test_provisioned_joins_carry_their_instance_id() -> None:
    w = World()
    w.expect("i-1", "n1")
    assert w.refused("n1").kind == "instance_id_required"
    assert w.refused("n1", "i-9").kind == "duplicate"
    w.join("n1", "i-1")


@pytest.mark.parametrize("name", ["host:evil", "i-0abc/x", "a b", "x%2f", "", "-lead", "a" * 300])
def test_names_that_could_be_keys_or_paths_are_refused(name: str) -> None:
    w = World()
    w.expect("i-0abc", "evil")
    assert w.refused(name).kind == "bad_request"
    assert w.speak(name, "whatever") == "unknown_credential"
    assert w.refused("ok", "i/1").kind == "bad_request"


def test_a_host_named_like_an_instance_id_does_not_reach_that_record() -> None:
    w = World()
    w.expect("i-0abc", "real")
    cred = w.join("i-0abc")  # a host *named* i-0abc: an unprovisioned record of its own
    assert w.speak("i-0abc", cred) == "host:i-0abc"
    assert w.cluster.hosts["i-0abc"].state is HostState.EXPECTED


def test_without_any_join_token_only_a_simulation_joins() -> None:
    w = World(replace(CFG, join_token=""))
    assert w.join("sim1", token="")


def test_sealed_secrets_are_salted_and_recognise_older_hashes() -> None:
    one, two = credentials.seal("s3cret"), credentials.seal("s3cret")
    assert one != two and credentials.matches("s3cret", one) and credentials.matches("s3cret", two)
    assert not credentials.matches("other", one) and not credentials.matches("", one)
    import hashlib

    legacy = hashlib.sha256(b"s3cret").hexdigest()
    assert credentials.matches("s3cret", legacy) and not credentials.matches("x", legacy)


def test_a_renewed_credential_fences_the_copy_once_presented() -> None:
    w = World()
    old = w.join("n1")
    new = credentials.mint()
    host = w.cluster.hosts["host:n1"]
    w.commit([joining.renew(host, 1.0, credentials.seal(new))])
    assert w.speak("n1", old) == "host:n1"  # the answer may have been lost: still good
    assert w.speak("n1", new) == "host:n1"  # presented: now the current one
    assert w.speak("n1", old) == "stale_incarnation"
    host = w.cluster.hosts["host:n1"]
    assert host.incarnation == 2 and host.refusals == 1 and not host.next_credential_hash


def test_renewal_confirmation_and_refusals_carry_reason_codes() -> None:
    w = World()
    old = w.join("n1")
    new = credentials.mint()
    renewed = joining.renew(w.cluster.hosts["host:n1"], 1.0, credentials.seal(new), "b2")
    assert (renewed.kind, renewed.data["code"]) == ("renewed", "credential_renewed")
    w.commit([renewed])
    _, facts = joining.speaker(w.cluster, 2.0, "n1", new)
    assert [(f.kind, f.data["code"]) for f in facts] == [("confirmed", "credential_confirmed")]
    w.commit(facts)
    with pytest.raises(lc.Refused) as info:
        joining.speaker(w.cluster, 3.0, "n1", old)
    [recorded] = info.value.record
    assert (recorded.kind, recorded.data["code"]) == ("refused", "refused_stale_incarnation")
