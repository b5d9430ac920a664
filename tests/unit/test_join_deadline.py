"""The join deadline: the machine on a fake clock, its record, its config keys, user-data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from xce_agent.config.agent import load_config
from xce_agent.config.join_deadline import JoinTimeout
from xce_agent.controller import join_deadline as jd
from xce_agent.errors import ConfigError
from xce_agent.operator.userdata import UserData, render


def test_gives_up_once_at_the_deadline_with_the_last_problem() -> None:
    watch = jd.watch_of(jd.JoinRecord("i-1", first_start=1000.0), 60.0)
    assert jd.next_due(watch) == 1060.0
    assert jd.step(watch, jd.Due("refused: unmatched"), 1059.9) == (watch, ())
    watch, actions = jd.step(watch, jd.Due("refused: unmatched"), 1060.0)
    assert actions == (jd.GiveUp("refused: unmatched"),) and jd.next_due(watch) is None
    assert jd.step(watch, jd.Due("again"), 2000.0)[1] == ()


def test_a_host_that_joined_once_never_gives_up() -> None:
    watch = jd.watch_of(jd.JoinRecord("i-1", 1000.0), 60.0)
    watch, actions = jd.step(watch, jd.Accepted(), 1010.0)
    assert actions == (jd.Remember(),)
    assert jd.step(watch, jd.Due("unreachable"), 5000.0)[1] == ()
    later = jd.watch_of(jd.JoinRecord("i-1", 1000.0, joined=True), 60.0)  # after a restart
    assert jd.next_due(later) is None and jd.step(later, jd.Due("x"), 9999.0)[1] == ()


def test_the_record_survives_restarts_and_a_new_instance_starts_afresh(tmp_path: Path) -> None:
    first = jd.load(tmp_path, "i-1", 1000.0)
    assert first == jd.JoinRecord("i-1", 1000.0)
    assert jd.load(tmp_path, "i-1", 2000.0).first_start == 1000.0  # a restart: not extended
    jd.save(tmp_path, jd.JoinRecord("i-1", 1000.0, joined=True))
    assert jd.load(tmp_path, "i-1", 3000.0).joined
    assert jd.load(tmp_path, "i-2", 4000.0) == jd.JoinRecord("i-2", 4000.0)  # same disk, new id
    (tmp_path / jd.RECORD_FILE).write_text("{garbage")
    assert jd.load(tmp_path, "i-2", 5000.0) == jd.JoinRecord("i-2", 5000.0)
    assert json.loads((tmp_path / jd.RECORD_FILE).read_text())["first_start"] == 5000.0


@pytest.mark.parametrize(
    "text",
    [
        '{"instance_id": "i-1", "first_start": NaN, "joined": false}',
        '{"instance_id": "i-1", "first_start": -Infinity, "joined": false}',
        '{"instance_id": "i-1", "first_start": true, "joined": false}',
        '{"instance_id": "i-1", "first_start": 10.0, "joined": false, "gave_up_at": NaN}',
        '{"instance_id": "i-1", "first_start": 10.0, "joined": "false"}',
        # An integer too large for a float: math.isfinite raised OverflowError and the
        # agent died at start with a traceback.
        '{"instance_id": "i-1", "first_start": 1%s, "joined": false}' % ("0" * 400),
        "[" * 100_000 + "]" * 100_000,  # nested past the stack: RecursionError ended the agent
    ],
)
def test_a_record_that_is_not_a_time_counts_from_now(tmp_path: Path, text: str) -> None:
    # NaN or -inf read as a deadline long past (the action at once at boot); "false" read
    # as joined (never).
    (tmp_path / jd.RECORD_FILE).write_text(text)
    assert jd.load(tmp_path, "i-1", 5000.0) == jd.JoinRecord("i-1", 5000.0)


def test_a_first_start_in_the_future_counts_from_now(tmp_path: Path) -> None:
    # The wall clock was ahead at the first start and stepped back since: the deadline is
    # not put off by that much (1e308 put it off for ever).
    for future in (5000.0 + 3600, 1e308):
        jd.save(tmp_path, jd.JoinRecord("i-1", future))
        assert jd.load(tmp_path, "i-1", 5000.0) == jd.JoinRecord("i-1", 5000.0)
        assert json.loads((tmp_path / jd.RECORD_FILE).read_text())["first_start"] == 5000.0


def test_a_host_that_joined_before_its_record_existed_never_gives_up(tmp_path: Path) -> None:
    # The record was lost, or join_deadline was set on a host that had joined long before:
    # its credential says it joined, so a controller away for a while does not power it off.
    assert jd.load(tmp_path, "i-1", 1000.0, joined_before=True).joined
    assert jd.load(tmp_path, "i-1", 2000.0).joined  # kept
    jd.save(tmp_path, jd.JoinRecord("i-1", 1000.0))
    record = jd.load(tmp_path, "i-1", 3000.0, joined_before=True)
    assert record == jd.JoinRecord("i-1", 1000.0, joined=True)
    assert jd.next_due(jd.watch_of(record, 60.0)) is None


def test_within_the_boot_of_the_first_start_the_monotonic_clock_counts(tmp_path: Path) -> None:
    # First start with the wall clock an hour behind (no RTC, before chrony); it is corrected,
    # and the agent restarts 10 s later: the record said an hour had passed, so it gave up
    # at once. In the same boot the monotonic clock tells; from another boot the wall clock.
    first = jd.load(tmp_path, "i-1", 1000.0, boot=("b1", 50.0))
    assert (first.first_start, first.boot_id, first.first_mono) == (1000.0, "b1", 50.0)
    restarted = jd.load(tmp_path, "i-1", 1000.0 + 3600 + 10, boot=("b1", 60.0))
    assert restarted.first_start == 1000.0 + 3600  # 10 s before now, as the clock now reads
    assert jd.next_due(jd.watch_of(restarted, 60.0)) == 1000.0 + 3600 + 60
    again = jd.load(tmp_path, "i-1", 1000.0 + 3600 + 20, boot=("b1", 70.0))
    assert again.first_start == restarted.first_start  # stable across restarts of that boot
    rebooted = jd.load(tmp_path, "i-1", 9000.0, boot=("b2", 5.0))
    assert rebooted.first_start == 1000.0 + 3600 and rebooted.boot_id == "b2"
    assert rebooted.first_mono == 5.0 - (9000.0 - 4600.0)
    (tmp_path / "other").mkdir()
    unknown = jd.load(tmp_path / "other", "i-1", 1000.0, boot=None)  # no boot id readable
    assert unknown.boot_id == "" and unknown.first_mono is None


def config(tmp_path: Path, instance: str, controller: bool = True) -> Path:
    head = "controller: {url: 'http://127.0.0.1:1', token: t}\n" if controller else ""
    path = tmp_path / "agent.yaml"
    path.write_text(
        f"version: 1\n{head}instance: {{id: i-1, {instance}}}\n"
        f"roles:\n  worker:\n    components:\n      w: {{command: [{sys.executable}]}}\n"
        f"state_directory: {tmp_path}/state\n"
    )
    return path


def test_config_keys(tmp_path: Path) -> None:
    inst = load_config(config(tmp_path, "join_deadline: 15m")).instance
    assert inst.join_deadline == 900.0 and inst.on_join_timeout == JoinTimeout("poweroff")
    inst = load_config(config(tmp_path, "join_deadline: 30s, on_join_timeout: none")).instance
    assert inst.on_join_timeout == JoinTimeout("none")
    text = f"join_deadline: 30s, on_join_timeout: [{sys.executable}, -c, pass]"
    inst = load_config(config(tmp_path, text)).instance
    assert inst.on_join_timeout == JoinTimeout("command", (sys.executable, "-c", "pass"))
    assert load_config(config(tmp_path, "template: default")).instance.join_deadline is None


@pytest.mark.parametrize(
    ("text", "controller", "message"),
    [
        ("join_deadline: 1s", True, "instance.join_deadline: expected a duration from 5s"),
        ("on_join_timeout: none", True, "instance.on_join_timeout: expected a join_deadline"),
        ("join_deadline: 1m, on_join_timeout: reboot", True, "instance.on_join_timeout: expected"),
        ("join_deadline: 1m, on_join_timeout: [/no/such]", True, "instance.on_join_timeout: exp"),
        ("join_deadline: 1m", False, "instance.join_deadline: expected a controller section"),
    ],
)
def test_bad_keys_are_one_line_each(
    tmp_path: Path, text: str, controller: bool, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(config(tmp_path, text, controller))
    assert len(info.value.problems) == 1 and info.value.problems[0].startswith(message)


def test_render_user_data_offers_it() -> None:
    data = UserData("https://ctl:8443", join_deadline="20m", on_join_timeout=("/bin/echo", "x"))
    doc = yaml.safe_load(render(data))
    agent = yaml.safe_load(doc["write_files"][0]["content"])
    assert agent["instance"]["join_deadline"] == "20m"
    assert agent["instance"]["on_join_timeout"] == ["/bin/echo", "x"]
    plain = yaml.safe_load(
        yaml.safe_load(render(UserData("https://c")))["write_files"][0]["content"]
    )
    assert "join_deadline" not in plain["instance"]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--join-deadline", "200h"], "--join-deadline"),  # the agent refuses above 168h
        (["--join-deadline", "4s"], "--join-deadline"),
        (["--join-deadline", "15m", "--on-join-timeout", ""], "--on-join-timeout"),  # was []
        (["--join-deadline", "15m", "--on-join-timeout", '"open'], "--on-join-timeout"),
        (["--worker-command", "/usr/sbin/xce-worker 'open"], "--worker-command"),
        (["--on-join-timeout", "none"], "--on-join-timeout"),  # was dropped: no deadline
    ],
)
def test_render_user_data_refuses_what_the_agent_would_in_one_line(
    args: list[str], option: str
) -> None:
    # An unclosed quote was a traceback (shlex's ValueError); 200h and an empty command were
    # written, and the instance's agent then refused its config at boot.
    from tests.unit.test_error_exits import _one_line, _runner
    from xce_agent.cli import main

    result = _runner().invoke(main, ["render-user-data", "--controller-url", "https://c", *args])
    assert result.exit_code == 2
    assert _one_line(result, "xce-agent").startswith(f"xce-agent: {option}: expected")
