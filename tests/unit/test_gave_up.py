"""POST /v1/join-timeout's decision (gave_up.py): an instance that gave up joining is overdue,
once."""

from __future__ import annotations

import pytest

from tests.unit.test_lifecycle import World
from xce_controller.core import lifecycle as lc
from xce_controller.core.gave_up import gave_up
from xce_controller.core.model import HostState


def test_a_repeat_adds_nothing() -> None:
    # The agent says so once; anyone holding the cluster join token could repeat it at will,
    # and each repeat was a fact and a history entry more.
    w = World()
    w.expect("i-1", expected_name="h1")
    req = lc.JoinRequest(name="h1", instance_id="i-1", token=w.cfg.join_token)
    _, facts = gave_up(w.cluster, w.cfg, w.now, req, "HTTP 403 unmatched (poweroff)")
    w.commit(facts)
    host = w.cluster.hosts["i-1"]
    assert host.state is HostState.OVERDUE
    assert host.reason == "agent gave up joining: HTTP 403 unmatched (poweroff)"
    for _ in range(3):
        again, facts = gave_up(w.cluster, w.cfg, w.now + 1, req, "forged")
        assert facts == [] and again.state is HostState.OVERDUE
    assert w.cluster.hosts["i-1"].history == host.history


def test_another_instance_under_the_expected_name_does_not_give_up_for_it() -> None:
    # i-999 was given h1's name (user-data copied): its join was refused as a duplicate, and
    # its give-up marked i-1, still booting, overdue, so the provisioner returned i-1.
    w = World()
    w.expect("i-1", expected_name="h1")
    req = lc.JoinRequest(name="h1", instance_id="i-999", token=w.cfg.join_token)
    with pytest.raises(lc.Refused) as info:
        gave_up(w.cluster, w.cfg, w.now, req, "HTTP 409 duplicate (poweroff)")
    assert info.value.status == 404 and "h1 is i-1's" in str(info.value)
    assert w.state("i-1") is HostState.EXPECTED
