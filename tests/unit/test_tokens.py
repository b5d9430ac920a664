"""Every role's token compared with every other: at start, at reload, and at `expect`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_error_exits import _runner
from xce_controller.cli.controller import main as controller_main
from xce_controller.core import lifecycle as lc
from xce_controller.core import tokens
from xce_controller.core.config import load_cluster_config
from xce_controller.core.model import Cluster
from xce_controller.service import Controller
from xce_controller.store.sqlite import Store
from xce_protocol.errors import ConfigError

BASE = "version: 1\ntemplates: {default: {slots: 1}}\n"


def write(tmp: Path, text: str) -> Path:
    path = tmp / "cluster.yaml"
    path.write_text(BASE + text)
    return path


def secret_file(path: Path, token: str) -> Path:
    path.write_text(token + "\n")
    os.chmod(path, 0o600)
    return path


def test_a_read_token_file_holding_the_generated_admin_token_stops_the_start(
    tmp_path: Path,
) -> None:
    """Before, `serve` took it, and the "read-only" token made admin calls."""
    db = tmp_path / "db"
    generated = secret_file(tmp_path / "db.admin-token", "generated-admin-0123456789")
    config = write(tmp_path, f"auth: {{read_token_file: {generated}}}\n")
    serve = [sys.executable, "-m", "xce_controller", "serve", "--db", str(db), "--config"]
    result = _runner().invoke(controller_main, ["validate", "--config", str(config)])
    assert result.exit_code == 0  # the config alone cannot tell: the admin token is made later
    # A subprocess: on a controller that takes the clash, `serve` serves (and is killed).
    done = subprocess.run(
        [*serve, str(config), "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    lines = done.stderr.splitlines()
    assert done.returncode == 78, done.stderr
    assert "Traceback" not in done.stderr and lines[-1].startswith("xce-controller: auth.")
    assert "auth.read_token" in lines[-1] and "generated admin token" in lines[-1]


def test_a_reload_to_a_clashing_token_keeps_the_running_config(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    ctl = Controller(load_cluster_config(write(tmp_path, "")), store)
    admin = ctl.cfg.admin_token
    good = write(tmp_path, "auth: {read_token: reader-0123456789}\n")
    assert ctl.reload_config(lambda: load_cluster_config(good)) == []
    assert ctl.cfg.read_token == "reader-0123456789"
    held = secret_file(tmp_path / "held", admin)
    bad = write(tmp_path, f"auth: {{read_token_file: {held}}}\n")
    problems = ctl.reload_config(lambda: load_cluster_config(bad))
    assert len(problems) == 1 and "auth.read_token" in problems[0]
    assert "generated admin token" in problems[0]
    assert ctl.cfg.read_token == "reader-0123456789"  # the running config is kept
    store.close()


@pytest.mark.parametrize("role", ["admin", "read", "provisioner"])
def test_a_role_token_equal_to_the_generated_join_token_is_refused(
    tmp_path: Path, role: str
) -> None:
    store = Store(tmp_path / "db")
    ctl = Controller(load_cluster_config(write(tmp_path, "")), store)
    join = ctl.cfg.join_token
    bad = write(tmp_path, f"auth: {{{role}_token: {join}}}\n")
    problems = ctl.reload_config(lambda: load_cluster_config(bad))
    assert problems and f"auth.{role}_token" in problems[0]
    assert "generated join token" in problems[0]
    store.close()


def test_a_per_instance_token_a_new_role_token_equals_is_a_config_error(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    cfg = load_cluster_config(write(tmp_path, "auth: {admin_token: admin-0123456789}\n"))
    ctl = Controller(cfg, store)
    ctl.commit(
        lc.expect(ctl.cluster, ctl.cfg, 0.0, "p", "i-1", "default", token="inst-0123456789ab")
    )
    clash = write(tmp_path, "auth: {admin_token: admin-0123456789, read_token: inst-0123456789ab}")
    problems = ctl.reload_config(lambda: load_cluster_config(clash))
    assert problems == [
        "auth.read_token: expected a token different from the join token of instance i-1, "
        "got the same token"
    ]
    store.close()
    with pytest.raises(ConfigError):  # and at the next start
        Controller(load_cluster_config(clash), Store(tmp_path / "db"))


@pytest.mark.parametrize(
    "token", ["x", "abc", "aaaaaaaaaaaaaaaaaaaaaaaa", "abababababababababab", "short-12345"]
)
def test_a_weak_per_instance_token_is_refused(token: str) -> None:
    cfg = load_cluster_config(None)
    cluster = Cluster()
    with pytest.raises(lc.Refused) as refused:
        lc.expect(cluster, cfg, 0.0, "p", "i-1", "default", token=token)
    assert (refused.value.kind, refused.value.status) == ("bad_request", 422)
    assert lc.expect(cluster, cfg, 0.0, "p", "i-1", "default", token="good-0123456789a")


@pytest.mark.parametrize("role", ["admin", "read", "provisioner", "join"])
def test_a_per_instance_token_equal_to_a_role_token_is_refused(role: str) -> None:
    cfg = tokens.with_token(load_cluster_config(None), role, "role-token-0123456789")
    with pytest.raises(lc.Refused) as refused:
        lc.expect(Cluster(), cfg, 0.0, "p", "i-1", "default", token="role-token-0123456789")
    assert (refused.value.kind, refused.value.status) == ("conflict", 409)
    assert role in refused.value.message


def test_clashes_name_both_roles() -> None:
    found = tokens.clashes({"admin": "a" * 20, "read": "a" * 20, "join": ""}, ("admin",))
    assert found == [
        "auth.read_token: expected a token different from the generated admin token (kept "
        "beside the database) (one token for two roles is one role), got the same token"
    ]
