"""xce_provisioner's config, runner and metrics, with a fake controller and a fake BMC."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from xce_protocol.reasons import Reason
from xce_provisioner.config import Config, ConfigError, ControllerSettings, load
from xce_provisioner.controller import ControllerError
from xce_provisioner.drivers.base import DriverError, Power, Request
from xce_provisioner.plan import Machine, Phase, Policy, Record, Step
from xce_provisioner.runner import Fenced, Runner

GOOD = """\
controller: {url: "http://127.0.0.1:1", token_file: /t}
bmcs:
  lab: {url: "https://10.0.0.5", username_file: /u, password_file: /p}
machines:
  - {name: node1, instance_id: rf-1, template: small, bmc: lab, system: /redfish/v1/Systems/1}
"""


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as failed:
        load(path)
    return [p.replace(str(path), "F") for p in failed.value.problems]


def test_a_good_config_loads_with_its_defaults(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(GOOD)
    cfg = load(path)
    assert cfg.machines == (Machine("node1", "rf-1", "small", "lab", "/redfish/v1/Systems/1"),)
    assert cfg.policy == Policy()
    assert cfg.bmcs["lab"].username_file == Path("/u")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            ("bmc: lab", "bmc: rack2"),
            "machines[0].bmc: expected one of the bmcs (lab), got 'rack2' (F line 5)",
        ),
        (
            ("system: /redfish/v1/Systems/1", "system: /Systems/1"),
            "machines[0].system: expected a Redfish system path (/redfish/v1/Systems/ID), "
            "got '/Systems/1' (F line 5)",
        ),
        (
            ("bmcs:", "graceful_timeout: soon\nbmcs:"),
            "graceful_timeout: expected a duration greater than 0 and at most 168h (seconds, or "
            "like 500ms, 30s, 5m, 1h), got 'soon' (F line 2)",
        ),
        (
            ("bmcs:", "exclude_states: [open]\nbmcs:"),
            "exclude_states[0]: expected one of decommissioned, lost, overdue, returned, "
            "got 'open' (F line 2)",
        ),
        (
            ("bmcs:", "keep_warm: -1\nbmcs:"),
            "keep_warm: expected an integer from 0 to 100000, got -1 (F line 2)",
        ),
        (
            ("bmcs:", "bmcz: 1\nbmcs:"),
            "bmcz: expected one of the keys attempts, bmcs, controller, exclude_states, "
            "graceful_timeout, idle_after, interval, join_deadline, keep_warm, machines, "
            "metrics_file, repair_wait, retry_wait, settle_timeout, got unknown key 'bmcz' "
            "(F line 2)",
        ),
    ],
)
def test_a_bad_config_says_where_and_what(
    tmp_path: Path, change: tuple[str, str], expected: str
) -> None:
    found = problems(tmp_path, GOOD.replace(*change))
    assert expected in found, found


def test_the_controller_is_one_url_or_the_replicas_list(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(GOOD)
    assert load(path).controller.urls == ("http://127.0.0.1:1",)
    listed = 'url: ["http://127.0.0.1:1/", "http://127.0.0.1:2"]'
    path.write_text(GOOD.replace('url: "http://127.0.0.1:1"', listed, 1))
    assert load(path).controller.urls == ("http://127.0.0.1:1", "http://127.0.0.1:2")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            '"http://127.0.0.1:1,http://127.0.0.1:2"',
            "controller.url: expected an http:// or https:// URL, got "
            "'http://127.0.0.1:1,http://127.0.0.1:2' (several URLs are written as a YAML list)",
        ),
        ("[]", "controller.url: expected a list of 1 to 16 URLs, got 0 entries"),
        (
            '["http://a:1", "ftp://b"]',
            "controller.url[1]: expected an http:// or https:// URL, got 'ftp://b'",
        ),
        (
            '["http://a:1", "http://a:1/"]',
            "controller.url[1]: expected a URL not listed before, got 'http://a:1'",
        ),
        ('"http://127.0.0.1:99999"', "controller.url: expected an http:// or https:// URL"),
        ('"http://127.0.0.1:abc"', "controller.url: expected an http:// or https:// URL"),
        ('"http://:18601"', "controller.url: expected an http:// or https:// URL"),
        ('"http://[::1"', "controller.url: expected an http:// or https:// URL"),
        ('["http://127.0.0.1:0"]', "controller.url[0]: expected an http:// or https:// URL"),
        (
            '"http://ctl.example\\\\@127.0.0.1/"',
            "controller.url: expected an http:// or https:// URL, got",
        ),
    ],
)
def test_a_bad_controller_url_says_which_and_why(tmp_path: Path, url: str, expected: str) -> None:
    found = problems(tmp_path, GOOD.replace('"http://127.0.0.1:1"', url, 1))
    assert any(expected in p for p in found), found


def test_two_machines_with_one_instance_id_are_refused(tmp_path: Path) -> None:
    twice = GOOD + GOOD.splitlines()[-1].replace("node1", "node2") + "\n"
    found = problems(tmp_path, twice)
    assert any(
        "machines[1].instance_id: expected an instance id no other machine has" in p for p in found
    )


M = Machine("node1", "rf-1", "small", "lab", "/redfish/v1/Systems/1")


class FakeController:
    def __init__(self, record: Record) -> None:
        self.record = record
        self.calls: list[tuple[str, ...]] = []
        self.refuse = ""
        self.refuse_reads = ""
        self.reads = 0

    def records(self) -> dict[str, Record]:
        self.reads += 1
        if self.refuse_reads:
            raise ControllerError("refused", self.refuse_reads, 409)
        return {self.record.instance_id: self.record}

    def step(self, iid: str, decision: str, action: str, phase: Phase, attempt: int, code: str,
             why: str = "") -> Record:  # fmt: skip
        if self.refuse:
            raise ControllerError("refused", self.refuse, 409)
        self.calls.append(("step", action, phase.value, code))
        steps = (*self.record.steps, Step(decision, action, phase, attempt, code))
        self.record = Record(iid, self.record.state, self.record.decision, 0, steps)
        return self.record

    def ack(self, iid: str) -> None:
        self.calls.append(("ack", iid))

    def expect(self, m: Machine, deadline: float | None) -> None:
        self.calls.append(("expect", m.name))


class FakeBmc:
    def __init__(self, calls: list[tuple[str, ...]]) -> None:
        self.calls = calls
        self.state = Power.OFF
        self.fail: DriverError | None = None

    def power(self, system: str) -> Power:
        return self.state

    def request(self, system: str, what: Request) -> None:
        self.calls.append(("request", what.value))
        if self.fail is not None:
            raise self.fail

    def close(self) -> None:
        pass


def runner(record: Record, tmp_path: Path) -> tuple[Runner, FakeController, FakeBmc]:
    ctl = FakeController(record)
    bmc = FakeBmc(ctl.calls)
    cfg = Config(
        ControllerSettings(("http://x",), Path("/t")),
        Policy(),
        {},
        (M,),
        metrics_file=tmp_path / "p.prom",
    )
    r = Runner(cfg, ctl, {"lab": bmc}, monotonic=lambda: 0.0)  # type: ignore[arg-type]
    return r, ctl, bmc


def test_a_step_is_written_before_its_request_and_its_outcome_after(tmp_path: Path) -> None:
    r, ctl, bmc = runner(Record("rf-1", "expected", "expected@1.000000"), tmp_path)
    r.once()
    assert ctl.calls == [
        ("step", "on", "begun", "power_on_expected"),
        ("request", "on"),
        ("step", "on", "issued", "power_on_expected"),
    ]
    r.once()
    assert len(ctl.calls) == 3, "in flight: nothing sent again"
    bmc.state = Power.ON
    r.once()
    assert ctl.calls[-1] == ("step", "on", "confirmed", "power_confirmed")
    text = (tmp_path / "p.prom").read_text()
    assert 'xce_provisioner_machines{power="on"} 1' in text
    assert (
        'xce_provisioner_power_steps_total{action="on",phase="issued",code="power_on_expected"} 1'
        in text
    )


def test_a_failed_request_is_written_with_the_bmc_code(tmp_path: Path) -> None:
    r, ctl, bmc = runner(Record("rf-1", "expected", "expected@1.000000"), tmp_path)
    bmc.fail = DriverError(Reason.BMC_TIMEOUT, "no answer")
    r.once()
    assert ctl.calls[-1] == ("step", "on", "failed", "bmc_timeout")
    assert (
        'xce_provisioner_bmc_errors_total{bmc="lab",code="bmc_timeout"} 1'
        in (tmp_path / "p.prom").read_text()
    )


def test_a_refused_lease_ends_the_run_before_any_request(tmp_path: Path) -> None:
    r, ctl, _bmc = runner(Record("rf-1", "expected", "expected@1.000000"), tmp_path)
    ctl.refuse = "stale_lease"
    with pytest.raises(Fenced):
        r.once()
    assert ("request", "on") not in ctl.calls


def test_a_read_refused_for_the_lease_ends_the_run_with_nothing_to_do(tmp_path: Path) -> None:
    """A holder whose lease moved on learns it from its pass's read, even idle (an open
    record asks for nothing); any other refusal of the read is waited out."""
    r, ctl, _bmc = runner(Record("rf-1", "open", "open@1.000000"), tmp_path)
    r.once()
    assert ctl.calls == [], "nothing to do: no write that the controller could refuse"
    ctl.refuse_reads = "unavailable"
    r.once()
    assert r.metrics.controller_errors == 1, "a read the controller could not answer: waited"
    ctl.refuse_reads = "stale_lease"
    with pytest.raises(Fenced):
        r.once()
    assert ctl.reads == 3


def test_the_ack_of_a_returned_instance_is_not_an_error(tmp_path: Path) -> None:
    r, ctl, _bmc = runner(Record("rf-1", "decommissioned", "decommissioned@1.000000"), tmp_path)

    def already(iid: str) -> Any:
        raise ControllerError("409", "not_returnable", 409)

    ctl.ack = already  # type: ignore[method-assign]
    r.once()  # off already: the ack, answered "not returnable" (an earlier answer lost)
    assert r.metrics.steps[("ack", "confirmed", "instance_returned")] == 1


@pytest.mark.parametrize("token", ["²", "12a", "", "-1", "١٢", "02", "+2", " 2", "9" * 17])
def test_a_lease_token_that_is_no_ascii_integer_is_a_usage_error(
    token: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from xce_provisioner.cli import _lease

    monkeypatch.setenv("XCE_LEASE_NAME", "provisioner")
    monkeypatch.setenv("XCE_LEASE_TOKEN", token)
    with pytest.raises(SystemExit) as exited:
        _lease()
    assert exited.value.code == 2
    assert "XCE_LEASE_TOKEN: expected an integer" in capsys.readouterr().err
    monkeypatch.setenv("XCE_LEASE_TOKEN", "42")
    assert _lease().token == 42


def test_a_lease_token_without_its_name_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from xce_provisioner.cli import _lease

    monkeypatch.setenv("XCE_LEASE_NAME", "")
    monkeypatch.setenv("XCE_LEASE_TOKEN", "5")
    with pytest.raises(SystemExit) as exited:
        _lease()
    assert exited.value.code == 2
    assert "XCE_LEASE_TOKEN is set but XCE_LEASE_NAME is not" in capsys.readouterr().err
    monkeypatch.delenv("XCE_LEASE_TOKEN")
    assert _lease().name == "", "neither: run by hand, no lease"


def test_the_status_file_says_the_lease_and_the_last_actions(tmp_path: Path) -> None:
    from xce_provisioner.controller import Lease

    r, ctl, _bmc = runner(Record("rf-1", "expected", "expected@1.0"), tmp_path)
    ctl.lease = Lease("provisioner", 7)  # type: ignore[attr-defined]
    r.status_file = tmp_path / "component-prov.status"
    r.once()
    text = r.status_file.read_text().splitlines()
    assert text[0] == "lease provisioner, token 7"
    assert "controller ok; machines 0 on, 1 off, 0 unknown" in text[1]
    assert text[-1].endswith("node1: on issued, attempt 1 [power_on_expected]")
    for _ in range(20):
        r.once()
    assert len(r.status_file.read_text().splitlines()) <= 2 + 5, "the last actions only"


def test_the_runner_forgets_what_the_records_no_longer_show(tmp_path: Path) -> None:
    """Months of decisions must not grow the process: the journal keys and the blocked notes
    of decisions the controller no longer lists are dropped."""
    r, ctl, _bmc = runner(Record("rf-1", "expected", "expected@0.0"), tmp_path)
    for i in range(200):
        ctl.record = Record("rf-1", "expected", f"expected@{i}.0", 0, ctl.record.steps[-2:])
        r.once()
    assert sum(1 for c in ctl.calls if c[:2] == ("step", "on")) >= 200, "each decision acted"
    assert len(r.seen) <= 4, f"{len(r.seen)} journal keys kept"
