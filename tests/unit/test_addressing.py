"""Any record can be addressed (by name, instance id or expected address) and decommissioned;
names are unique across expected and joined records; the join refusals come in their order."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_joining import World
from xce_controller.core import joining
from xce_controller.core import lifecycle as lc
from xce_controller.core.config import load_cluster_config
from xce_controller.core.model import AdminAction, HostState
from xce_controller.service import Controller
from xce_controller.store.sqlite import Store

TOKEN = "instance-token-0123456789"


@pytest.fixture
def ctl(tmp_path: Path) -> Controller:
    return Controller(load_cluster_config(None), Store(tmp_path / "db"))


def expect(ctl: Controller, iid: str, name: str = "", address: str = "", token: str = "") -> None:
    now = ctl.clock()
    ctl.commit(
        lc.expect(ctl.cluster, ctl.cfg, now, "p", iid, "default", name, address, token=token)
    )


def join(ctl: Controller, name: str, iid: str, token: str) -> lc.JoinRequest:
    return lc.JoinRequest(name=name, instance_id=iid, token=token)


@pytest.mark.parametrize("ref", ["i-0abc", "10.1.2.3"])
def test_an_unnamed_expected_instance_is_decommissioned_and_its_join_refused(
    ctl: Controller, ref: str
) -> None:
    """Before: 404 `no host`, and the instance joined with its (leaked) token."""
    expect(ctl, "i-0abc", address="10.1.2.3", token=TOKEN)
    host = ctl.control(ref, AdminAction.DECOMMISSION, "admin", why="token leaked")
    assert (host.key, host.state) == ("i-0abc", HostState.DECOMMISSIONED)
    with pytest.raises(lc.Refused) as refused:
        ctl.join(join(ctl, "n1", "i-0abc", TOKEN))
    assert (refused.value.status, refused.value.kind) == (410, "decommissioned")
    # The token joins nothing else either, under another name or instance.
    with pytest.raises(lc.Refused) as other:
        ctl.join(join(ctl, "n2", "i-other", TOKEN))
    assert other.value.status == 401
    assert ctl.join(join(ctl, "n3", "i-3", ctl.cfg.join_token))[0].state is HostState.OPEN


def test_close_open_and_why_address_records_by_instance_id(ctl: Controller) -> None:
    expect(ctl, "i-1", address="10.0.0.1")
    ctl.join(join(ctl, "n1", "i-1", ctl.cfg.join_token))
    assert ctl.control("i-1", AdminAction.CLOSE, "admin").state is HostState.CLOSED
    assert ctl.control("10.0.0.1", AdminAction.OPEN, "admin").state is HostState.OPEN
    assert ctl.find_host("n1").key == ctl.find_host("i-1").key == "i-1"


def test_a_reference_that_fits_two_live_records_is_refused_with_both(ctl: Controller) -> None:
    expect(ctl, "i-1", address="10.0.0.9")
    expect(ctl, "i-2", address="10.0.0.9")
    with pytest.raises(lc.Refused) as refused:
        ctl.control("10.0.0.9", AdminAction.DECOMMISSION, "admin")
    assert (refused.value.status, refused.value.kind) == (409, "ambiguous")
    assert "i-1" in refused.value.message and "i-2" in refused.value.message
    assert [c["instance_id"] for c in refused.value.details["candidates"]] == ["i-1", "i-2"]
    assert ctl.cluster.hosts["i-1"].state is HostState.EXPECTED  # nothing was done
    assert ctl.control("i-2", AdminAction.DECOMMISSION, "admin").state is HostState.DECOMMISSIONED
    assert ctl.find_host("10.0.0.9").key == "i-1"  # the one live record left
    with pytest.raises(lc.Refused) as none:
        ctl.find_host("10.9.9.9")
    assert none.value.status == 404


def test_an_expected_name_a_joined_host_holds_is_refused() -> None:
    """Before: recorded (201); the join that followed was refused, two records shared a name."""
    w = World()
    w.join("n1")
    with pytest.raises(lc.Refused) as refused:
        w.expect("i-1", "N1")
    assert (refused.value.status, refused.value.kind) == (409, "duplicate")
    w.expect("i-2", "n2")
    with pytest.raises(lc.Refused) as waiting:
        w.expect("i-3", "n2")  # another expected record's name
    assert waiting.value.status == 409
    assert "i-3" not in w.cluster.hosts
    w.decommission("host:n1")
    w.expect("i-1", "n1")  # a decommissioned name may be expected again
    assert w.cluster.hosts["i-1"].expected_name == "n1"


def test_a_new_instance_under_a_decommissioned_name_gets_name_decommissioned() -> None:
    """Before: 401 unauthorized (the cluster token was compared with the old record's)."""
    w = World()
    w.expect("i-old", "d3", token="old-instance-token-01")
    w.join("d3", "i-old", token="old-instance-token-01")
    w.decommission("i-old")
    refused = w.refused("d3", "i-new")
    assert (refused.status, refused.kind) == (409, "name_decommissioned")
    assert w.refused("d3", "i-new", token="wrong").kind == "unauthorized"
    assert w.refused("d3", "i-old", token="old-instance-token-01").status == 410
    w.expect("i-new", "d3")  # expected under the name, the new instance may take it
    assert w.join("d3", "i-new")


def test_the_agents_provider_reaches_an_expected_record_that_named_none() -> None:
    """Before: shown `-` unless `expect --provider` was given."""
    w = World()
    w.expect("i-1", "n1")
    secret = w.join_with(lc.JoinRequest(name="n1", instance_id="i-1", provider="aws"))
    assert secret and w.cluster.hosts["i-1"].provider == "aws"
    w.commit(lc.expect(w.cluster, w.cfg, 0.0, "p", "i-2", "default", "n2", provider="gcp"))
    w.join_with(lc.JoinRequest(name="n2", instance_id="i-2", provider="aws"))
    assert w.cluster.hosts["i-2"].provider == "gcp"  # the provisioner's word stands


def test_a_name_expected_again_after_a_decommission_means_the_new_record(
    ctl: Controller,
) -> None:
    """Before: `n1` meant the decommissioned record; the expected one could not be closed or
    decommissioned by its name."""
    ctl.join(join(ctl, "n1", "", ctl.cfg.join_token))
    ctl.control("n1", AdminAction.DECOMMISSION, "admin")
    expect(ctl, "i-2", name="n1", token=TOKEN)
    assert ctl.find_host("n1").key == "i-2"
    host = ctl.control("n1", AdminAction.DECOMMISSION, "admin", why="token leaked")
    assert (host.key, host.state) == ("i-2", HostState.DECOMMISSIONED)


@pytest.mark.parametrize("joined_as", ["i-0abc", "10.1.2.3"])
def test_a_name_that_is_another_records_instance_or_address_is_ambiguous(
    ctl: Controller, joined_as: str
) -> None:
    """Before: the host that joined under the name was taken (decommissioning it left the
    expected instance, and its leaked token, alive)."""
    expect(ctl, "i-0abc", address="10.1.2.3", token=TOKEN)
    ctl.join(join(ctl, joined_as, "", ctl.cfg.join_token))
    with pytest.raises(lc.Refused) as refused:
        ctl.control(joined_as, AdminAction.DECOMMISSION, "admin")
    assert (refused.value.status, refused.value.kind) == (409, "ambiguous")
    assert {c["key"] for c in refused.value.details["candidates"]} == {
        "i-0abc",
        f"host:{joined_as}",
    }
    assert all(h.state is not HostState.DECOMMISSIONED for h in ctl.cluster.hosts.values())
    # Each candidate names the prefixed reference that reaches it alone, and it works: both
    # records can still be decommissioned (before it, neither could be, by any reference).
    refs = {c["key"]: c["ref"] for c in refused.value.details["candidates"]}
    assert all(r in refused.value.message for r in refs.values())
    for key, ref in refs.items():
        assert ctl.find_host(ref).key == key
    for key, ref in refs.items():
        assert ctl.control(ref, AdminAction.DECOMMISSION, "admin").key == key
    assert all(h.state is HostState.DECOMMISSIONED for h in ctl.cluster.hosts.values())


def test_a_prefixed_reference_looks_in_its_own_kind_only(ctl: Controller) -> None:
    expect(ctl, "i-0abc", address="10.1.2.3", token=TOKEN)
    assert ctl.find_host("instance:i-0abc").key == "i-0abc"
    assert ctl.find_host("address:10.1.2.3").key == "i-0abc"
    for missing in ("host:i-0abc", "instance:10.1.2.3", "address:i-0abc", "host:", "bogus:x"):
        with pytest.raises(lc.Refused) as none:
            ctl.find_host(missing)
        assert none.value.status == 404, missing


def test_a_decommissioned_hosts_agent_is_told_so_when_its_name_is_expected_again() -> None:
    """Before: 401 unauthorized (its join was matched to the new expected record), so it kept
    trying instead of stopping for good."""
    w = World()
    credential = w.join("n1", boot="old")
    w.decommission("host:n1")
    w.expect("i-2", "n1", token=TOKEN)
    refused = w.refused("n1", token=credential, boot="old")
    assert (refused.status, refused.kind) == (410, "decommissioned")
    assert w.join("n1", "i-2", token=TOKEN)  # the new instance still joins under the name


@pytest.mark.parametrize("iid", ["", "i-old"])
def test_a_decommissioned_hosts_agent_is_told_so_after_a_new_instance_took_its_name(
    iid: str,
) -> None:
    """Before: its heartbeat and its join were answered 401 (the new host's record), so it
    joined again and again instead of stopping for good."""
    w = World()
    if iid:
        w.expect(iid, "n1")
    credential = w.join("n1", iid, boot="old")
    w.decommission(iid or "host:n1")
    w.expect("i-2", "n1")
    w.join("n1", "i-2", boot="new")
    with pytest.raises(lc.Refused) as heartbeat:  # its agent names its instance, if any
        joining.speaker(w.cluster, 0.0, "n1", credential, iid)
    assert (heartbeat.value.status, heartbeat.value.kind) == (410, "decommissioned")
    assert w.refused("n1", iid, token=credential, boot="old").status == 410
    assert w.speak("n1", "not-a-credential") == "unknown_credential"
