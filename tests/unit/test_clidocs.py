"""The man pages, shell completion and docs/reference.md come from the commands themselves:
every verb is in its program's page, the completion scripts load and complete, and the
committed reference is what the code says today."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import click
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _clidocs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("clidocs", ROOT / "packaging/python/clidocs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["clidocs"] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


clidocs = _clidocs()
PROGRAMS = {p.name: p for p in clidocs.PROGRAMS}
# The verbs the hand-written pages had left out, named so a generator that lost them fails.
ONCE_MISSING = {
    "xcecli": {"why", "events", "leases", "templates", "cancel", "host", "expect"},
    "xce-agent": {"reload", "reset", "restart", "start", "demo"},
    "xce-controller": {"openapi", "simulate", "demo", "validate"},
    "xce-provisioner": {"run", "check"},  # its page was written by hand, apart from the others
}


def test_every_installed_command_has_its_page_completion_and_package() -> None:
    """Each product's console scripts are programs of clidocs, in the package installing them:
    a command added to a product gets its man page and completion with no list to update."""
    tomllib = pytest.importorskip("tomllib", reason="reads pyproject files (Python 3.11+)")
    installed = {}
    for product in sorted((ROOT / "packaging/python").glob("*/pyproject.toml")):
        project = tomllib.loads(product.read_text())["project"]
        package = product.parent.name.replace("xce-protocol", "python3-xce-protocol")
        installed.update({name: package for name in project.get("scripts", {})})
    assert "xce-provisioner" in installed
    assert {p.name: p.package for p in clidocs.PROGRAMS} == installed


def _envvars(group: click.Group) -> set[str]:
    found: set[str] = set()
    for command in [group, *group.commands.values()]:
        for param in command.params:
            envvar = param.envvar
            names = list(envvar) if isinstance(envvar, (list, tuple)) else [envvar]
            found |= {str(name) for name in names if name}
    return found


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_man_page_names_every_environment_variable_an_option_reads(name: str) -> None:
    program = PROGRAMS[name]
    page = clidocs.man_page(program, "1.0")
    environment = page.split(".SH ENVIRONMENT\n")[1].split(".SH ")[0] if ".SH ENV" in page else ""
    for variable in sorted(_envvars(program.load())):
        assert f".B {clidocs._roff(variable)}\n" in environment, variable


def test_the_committed_reference_is_what_the_code_says(tmp_path: Path) -> None:
    committed = (ROOT / "docs/reference.md").read_text()
    assert clidocs.reference(tmp_path / "config.yaml") == committed, (
        "run: python3 packaging/python/clidocs.py reference docs/reference.md"
    )


def test_the_reference_has_every_config_key_of_the_provisioner_too(tmp_path: Path) -> None:
    text = clidocs.reference(tmp_path / "config.yaml")
    section = text.split("## Provisioner config (`xce-provisioner run --config`)\n")[1]
    for key in ("controller.token_file", "bmcs.NAME.url", "machines[N].system", "idle_after"):
        assert f"| `{key}` |" in section, key


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_man_page_lists_every_verb_with_its_options(name: str) -> None:
    program = PROGRAMS[name]
    page = clidocs.man_page(program, "9.9")
    verbs = dict(clidocs.commands(program.load()))
    assert ONCE_MISSING[name] <= set(verbs)
    for verb, command in verbs.items():
        assert f".B {clidocs._roff(name + ' ' + verb)} " in page, verb
        for flag, _ in clidocs.options(command):
            if flag != "--help":
                assert f".B {clidocs._roff(flag)}\n" in page, (verb, flag)
    assert page.startswith(f".TH {name.upper()} 1 ")
    assert '"9.9"' not in page and f"{program.package} 9.9" in page


@pytest.mark.skipif(shutil.which("groff") is None, reason="needs groff (man-db)")
def test_the_man_pages_render_without_warnings(tmp_path: Path) -> None:
    for program in clidocs.PROGRAMS:
        source = tmp_path / f"{program.name}.1"
        source.write_text(clidocs.man_page(program, "1.0"))
        out = subprocess.run(
            ["groff", "-man", "-ww", "-z", str(source)], capture_output=True, text=True
        )
        assert out.returncode == 0 and out.stderr == "", out.stderr


def _scripts(tmp_path: Path) -> Path:
    assert clidocs.main(["completion", str(tmp_path)]) == 0
    return tmp_path


def _env() -> dict[str, str]:
    # The scripts run the command itself to complete: the one of this environment.
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_loads_and_completes_verbs_and_choices(tmp_path: Path) -> None:
    scripts = _scripts(tmp_path)
    for name in PROGRAMS:
        loaded = subprocess.run(
            ["bash", "-c", f"source {scripts / 'bash' / name} && complete -p {name}"],
            capture_output=True,
            text=True,
            env=_env(),
        )
        assert loaded.returncode == 0 and name in loaded.stdout, loaded.stderr
    line = (
        f"source {scripts / 'bash/xcecli'}; COMP_WORDS=(xcecli {{words}}); "
        'COMP_CWORD={cword}; _xcecli_completion xcecli; printf "%s\\n" "${{COMPREPLY[@]}}"'
    )
    for words, cword, want in (("deco", 1, ["decommission"]), ("hosts -o ''", 3, None)):
        out = subprocess.run(
            ["bash", "-c", line.format(words=words, cword=cword)],
            capture_output=True,
            text=True,
            env=_env(),
        )
        got = out.stdout.split()
        assert got == (want or ["table", "wide", "json"]), (words, out.stdout, out.stderr)


@pytest.mark.skipif(shutil.which("zsh") is None, reason="needs zsh (make e2e-deps installs it)")
def test_zsh_completion_loads(tmp_path: Path) -> None:
    scripts = _scripts(tmp_path)
    for name in PROGRAMS:
        function = f"_{name.replace('-', '_')}_completion"
        out = subprocess.run(
            [
                "zsh",
                "-fc",
                f"autoload -Uz compinit && compinit -u -d {tmp_path}/.zcompdump && "
                f"source {scripts / 'zsh' / ('_' + name)} && whence -w {function}",
            ],
            capture_output=True,
            text=True,
            env=_env(),
        )
        assert out.returncode == 0 and f"{function}: function" in out.stdout, out.stderr


@pytest.mark.skipif(shutil.which("fish") is None, reason="needs fish (make e2e-deps installs it)")
def test_fish_completion_loads_and_completes(tmp_path: Path) -> None:
    scripts = _scripts(tmp_path)
    out = subprocess.run(
        [
            "fish",
            "--no-config",
            "-c",
            f"source {scripts / 'fish/xcecli.fish'}; complete -C'xcecli deco'; "
            f"source {scripts / 'fish/xce-agent.fish'}; complete -C'xce-agent rel'",
        ],
        capture_output=True,
        text=True,
        env={**_env(), "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    assert [line.split("\t")[0] for line in out.stdout.splitlines()] == ["decommission", "reload"]
