"""`validate` checks a component's program as its `user:`, not as root who validates.

Every directory on the way must be searchable by that user and the file executable by it
(modes, access ACLs); a lookup on PATH takes the first the user may run, as exec does.
"""

from __future__ import annotations

import os
import pwd
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from xce_agent import cli


def _nobody() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:  # pragma: no cover - every Debian has it
        return None


NOBODY = _nobody()

pytestmark = pytest.mark.skipif(NOBODY is None, reason="needs a 'nobody' user")
ROOT = os.geteuid() == 0


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A directory every user may search (pytest's own are 0700 under a 0700 parent)."""
    place = Path(tempfile.mkdtemp(prefix="xce-program-access-", dir="/tmp"))
    place.chmod(0o755)
    yield place
    for directory, _, _ in os.walk(place):
        os.chmod(directory, 0o700)  # searchable again by its owner, to remove it
    shutil.rmtree(place)


def _program(directory: Path, mode: int = 0o755) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    program = directory / "w"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(mode)
    return program


def _config(tmp_path: Path, command: str, extra: str = "") -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(
        "version: 1\ninstance: {id: i-1}\n"
        f"state_directory: {tmp_path / 'state'}\n"
        "roles:\n  worker:\n    components:\n"
        f"      w: {{command: {command}, user: nobody{extra}}}\n"
    )
    path.chmod(0o644)
    return path


def _validate(config: Path) -> tuple[int, str]:
    out = CliRunner().invoke(cli.main, ["validate", "--config", str(config)])
    return out.exit_code, out.output


def test_a_directory_the_user_cannot_search_is_named_with_the_user(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    program = _program(closed / "bin")
    closed.chmod(0o700)
    config = _config(tmp_path, f"[{program}]")
    code, output = _validate(config)
    assert code == 78, output
    assert output.count("\n") == 1, output  # one line
    assert "user 'nobody'" in output and f"cannot search {closed} (drwx------" in output
    assert "line 7" in output
    closed.chmod(0o755)  # the same config, once the user may pass: the input was the mode
    assert _validate(config) == (0, f"{config}: ok\n")


def test_a_file_only_its_owner_may_execute_is_refused(tmp_path: Path) -> None:
    program = _program(tmp_path / "bin", 0o744)
    config = _config(tmp_path, f"[{program}]")
    code, output = _validate(config)
    assert code == 78 and f"cannot execute {program} (-rwxr--r--" in output, output
    program.chmod(0o755)
    assert _validate(config)[0] == 0


def test_an_exec_probe_is_checked_as_the_components_user(tmp_path: Path) -> None:
    good = _program(tmp_path / "open")
    bad = _program(tmp_path / "mine", 0o700)
    config = _config(tmp_path, f"[{good}]", f", liveness_probe: {{exec: [{bad}]}}")
    code, output = _validate(config)
    assert code == 78 and output.startswith("roles.worker.components.w.liveness_probe.exec:")
    assert f"cannot execute {bad}" in output and output.count("\n") == 1


def test_a_symlink_into_a_closed_directory_is_followed(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    program = _program(closed)
    closed.chmod(0o700)
    (tmp_path / "open").mkdir()
    link = tmp_path / "open" / "w"
    link.symlink_to(program)
    code, output = _validate(_config(tmp_path, f"[{link}]"))
    assert code == 78 and f"cannot search {closed}" in output, output


def test_path_lookup_takes_the_first_program_the_user_may_run(tmp_path: Path) -> None:
    mine = _program(tmp_path / "mine", 0o700)  # found first on PATH, but not for nobody
    env = f", environment: {{PATH: '{mine.parent}'}}"
    code, output = _validate(_config(tmp_path, "[w]", env))
    assert code == 78 and f"got '{mine}': user 'nobody'" in output, output
    theirs = _program(tmp_path / "theirs")
    env = f", environment: {{PATH: '{mine.parent}:{theirs.parent}'}}"
    assert _validate(_config(tmp_path, "[w]", env))[0] == 0  # exec goes on to the next


def test_without_a_user_the_program_is_checked_as_the_agent(tmp_path: Path) -> None:
    program = _program(tmp_path / "mine", 0o700)
    config = tmp_path / "agent.yaml"
    config.write_text(
        "version: 1\ninstance: {id: i-1}\n"
        f"state_directory: {tmp_path / 'state'}\n"
        f"roles: {{worker: {{components: {{w: {{command: [{program}]}}}}}}}}\n"
    )
    assert _validate(config)[0] == 0


def _set_acl(path: Path, entries: list[tuple[int, int, int]]) -> None:
    # Entries in the kernel's order: by tag, then id.
    raw = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in sorted(entries))
    try:
        os.setxattr(path, "system.posix_acl_access", raw)
    except OSError as exc:  # pragma: no cover - a file system without ACLs
        pytest.skip(f"no POSIX ACLs here: {exc}")


def test_an_acl_entry_for_the_user_is_honoured_and_its_mask_too(tmp_path: Path) -> None:
    assert NOBODY is not None
    closed = tmp_path / "closed"
    program = _program(closed)
    closed.chmod(0o700)
    config = _config(tmp_path, f"[{program}]")
    assert _validate(config)[0] == 78  # without the ACL
    user_obj, user, mask, group_obj, other = 0x01, 0x02, 0x10, 0x04, 0x20
    base = [(user_obj, 7, 0xFFFFFFFF), (group_obj, 0, 0xFFFFFFFF), (other, 0, 0xFFFFFFFF)]
    _set_acl(closed, [*base, (user, 5, NOBODY.pw_uid), (mask, 5, 0xFFFFFFFF)])
    assert _validate(config) == (0, f"{config}: ok\n")
    _set_acl(closed, [*base, (user, 5, NOBODY.pw_uid), (mask, 4, 0xFFFFFFFF)])
    code, output = _validate(config)
    assert code == 78 and "with an ACL" in output, output


@pytest.mark.skipif(not ROOT, reason="runs validate as another user: needs root")
def test_validating_as_another_unprivileged_user_says_it_cannot_tell(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    program = _program(closed)
    closed.chmod(0o700)
    config = tmp_path / "agent.yaml"
    config.write_text(
        "version: 1\ninstance: {id: i-1}\n"
        f"state_directory: {tmp_path / 'state'}\n"
        f"roles: {{worker: {{components: {{w: {{command: [{program}], user: daemon}}}}}}}}\n"
    )
    config.chmod(0o644)
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    validate = [sys.executable, "-m", "xce_agent", "validate", "--config", str(config)]
    out = subprocess.run([*as_nobody, *validate], capture_output=True, text=True, check=False)
    assert out.returncode == 78, out
    assert "cannot tell whether user 'daemon' (uid 1) may run it" in out.stdout
    assert "this check runs as uid 65534" in out.stdout and out.stdout.count("\n") == 1
    as_root = subprocess.run(validate, capture_output=True, text=True, check=False)
    assert as_root.returncode == 78 and f"cannot search {closed}" in as_root.stdout


def test_a_script_its_user_may_execute_but_not_read_is_refused(tmp_path: Path) -> None:
    script = _program(tmp_path / "bin", 0o711)  # #!/bin/sh: sh must read it as the user
    config = _config(tmp_path, f"[{script}]")
    code, output = _validate(config)
    assert code == 78 and f"cannot read {script} (-rwx--x--x" in output, output
    binary = tmp_path / "bin" / "true"
    shutil.copy("/bin/true", binary)
    binary.chmod(0o711)  # a binary the kernel maps itself: execute is enough
    assert _validate(_config(tmp_path, f"[{binary}]"))[0] == 0
    script.chmod(0o755)
    assert _validate(config)[0] == 0


def test_a_directory_in_the_programs_place_is_passed_over_as_exec_does(tmp_path: Path) -> None:
    (tmp_path / "first" / "w").mkdir(parents=True)  # exec of a directory fails: the next is tried
    theirs = _program(tmp_path / "theirs")
    env = f", environment: {{PATH: '{tmp_path / 'first'}'}}"
    code, output = _validate(_config(tmp_path, "[w]", env))
    assert code == 78 and "is not a regular file" in output, output
    env = f", environment: {{PATH: '{tmp_path / 'first'}:{theirs.parent}'}}"
    assert _validate(_config(tmp_path, "[w]", env))[0] == 0
