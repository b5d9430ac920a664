"""The examples the packages ship under /usr/share/doc: the configs validate once the files they
name exist, and the systemd drop-ins and units load without a warning beside the project's
units (a misspelt directive is only a warning to systemd, so the check must be this strict)."""

from __future__ import annotations

import getpass
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xce_agent.config.agent import load_config
from xce_controller.core.config import load_cluster_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def localized(text: str, tmp_path: Path, files: dict[str, str]) -> str:
    """The example with /etc/xce/ moved to tmp_path, where `files` are created."""
    for name, content in files.items():
        (tmp_path / name).write_text(content)
        (tmp_path / name).chmod(0o600)
    return text.replace("/etc/xce/", f"{tmp_path}/")


def test_the_example_agent_config_validates(tmp_path: Path) -> None:
    files = {
        "ca.pem": "(a CA bundle: only its presence is checked)\n",
        "join-token": "join-secret\n",
    }
    text = localized((EXAMPLES / "agent.yaml").read_text(), tmp_path, files)
    # The worker's program and user of a real host: this one's stand-ins.
    text = text.replace("/usr/sbin/xce-worker", sys.executable)
    text = text.replace("user: xce", f"user: {getpass.getuser()}")
    data = tmp_path / "instance-data.json"
    data.write_text(json.dumps({"v1": {"instance_id": "i-0example", "cloud_name": "aws"}}))
    (tmp_path / "agent.yaml").write_text(text)
    config = load_config(tmp_path / "agent.yaml", instance_data=data)
    assert config.controller is not None and config.controller.token == "join-secret"
    assert config.instance.id == "i-0example"


def test_the_example_controller_config_validates(tmp_path: Path) -> None:
    tokens = {f"{kind}-token": f"{kind}-secret\n" for kind in ("admin", "provisioner", "join")}
    tokens["read-token"] = "read-secret\n"
    text = localized((EXAMPLES / "controller.yaml").read_text(), tmp_path, tokens)
    (tmp_path / "controller.yaml").write_text(text)
    config = load_cluster_config(tmp_path / "controller.yaml")
    assert config.admin_token == "admin-secret" and config.read_token == "read-secret"
    assert {"default", "gpu-large"} <= set(config.templates)
    # The packaged default config still validates as it is.
    load_cluster_config(ROOT / "packaging" / "controller.yaml")


def verify(units: Path, unit: str) -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("needs systemd-analyze (Debian: systemd)")
    done = subprocess.run(
        [tool, "verify", "--man=no", str(units / unit)],
        capture_output=True,
        text=True,
        env={"SYSTEMD_UNIT_PATH": f"{units}:", "PATH": "/usr/bin:/bin"},
    )
    return (done.stdout + done.stderr).strip() + ("" if done.returncode == 0 else " (failed)")


def unit_dir(tmp_path: Path) -> Path:
    """The project's units, their ExecStart= made runnable here (verify checks the program)."""
    units = tmp_path / "units"
    units.mkdir()
    controller = shutil.which("xce-controller") or str(
        Path(sys.executable).parent / "xce-controller"
    )
    for path in [*(ROOT / "systemd").glob("*.service"), *(EXAMPLES / "systemd").glob("*.[st]*")]:
        text = path.read_text().replace("/usr/bin/xce-controller", controller)
        text = text.replace("/usr/bin/xce-agent", controller)
        (units / path.name).write_text(text)
    return units


@pytest.mark.parametrize(
    "unit, drop_in",
    [
        ("xce-agent.service", "xce-agent-job-limits.conf"),
        ("xce-controller.service", "xce-controller-tls.conf"),
    ],
)
def test_the_example_drop_ins_load_without_a_warning(
    tmp_path: Path, unit: str, drop_in: str
) -> None:
    units = unit_dir(tmp_path)
    directory = units / f"{unit}.d"
    directory.mkdir()
    text = (EXAMPLES / "systemd" / drop_in).read_text()
    (directory / drop_in).write_text(text)
    assert verify(units, unit) == ""
    # The check sees the drop-in: a misspelt directive in it is reported.
    (directory / drop_in).write_text(text.replace("[Service]", "[Service]\nLimitMEMLOK=1"))
    assert "Unknown key" in verify(units, unit) and drop_in in verify(units, unit)


def test_the_example_backup_timer_and_service_load_without_a_warning(tmp_path: Path) -> None:
    units = unit_dir(tmp_path)
    assert verify(units, "xce-controller-backup.service") == ""
    assert verify(units, "xce-controller-backup.timer") == ""


def test_the_job_limits_drop_in_sets_what_slurmd_sets_for_jobs() -> None:
    text = (EXAMPLES / "systemd" / "xce-agent-job-limits.conf").read_text()
    settings = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#"
    )
    assert settings["LimitMEMLOCK"] == "infinity" and settings["LimitSTACK"] == "infinity"
    assert int(settings["LimitNOFILE"]) >= 65536
