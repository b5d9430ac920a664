#!/usr/bin/env python3
"""Man pages, shell completion and docs/reference.md, written from the click commands and the
config checkers themselves, so none of them can say something the code does not do.

usage: clidocs.py man OUTDIR          xce-agent.1, xce-controller.1, xcecli.1, xce-provisioner.1
       clidocs.py completion OUTDIR   bash/, zsh/ and fish/ completion of the four commands
       clidocs.py reference [FILE]    every command and config key as Markdown (docs/reference.md)

The package builds (packaging/debian/rules, packaging/rpm/xce-agent.spec) run `man` and
`completion`; tests/unit/test_clidocs.py regenerates the reference and compares it with the
committed one. Run from the top of the tree (it imports the four packages from there).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import click

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Program:
    name: str
    package: str  # the Debian/RPM package installing it
    summary: str  # the man page's NAME line
    load: Callable[[], click.Group]
    environment: tuple[tuple[str, str], ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    exit_status: str = ""
    see_also: tuple[str, ...] = ()


def _agent() -> click.Group:
    from xce_agent.cli import main

    return main


def _controller() -> click.Group:
    from xce_controller.cli.controller import main

    return main


def _xcecli() -> click.Group:
    from xce_controller.cli.xcecli import main

    return main


def _provisioner() -> click.Group:
    from xce_provisioner.cli import main

    return main


PROGRAMS = (
    Program(
        "xce-agent",
        "xce-agent",
        "node agent of elastic XCE batch scheduler hosts",
        _agent,
        environment=(
            ("XCE_AGENT_CONFIG", "The config file when --config is not given."),
            (
                "XCE_AGENT_CGROUP",
                "A cgroup v2 directory the caller created and owns, for running outside systemd.",
            ),
        ),
        files=(
            ("/etc/xce/agent.yaml", "The config (--config or XCE_AGENT_CONFIG select another)."),
            ("/var/lib/xce-agent", "The state directory."),
        ),
        exit_status="0 success; 1 runtime failure; 2 usage error; 3 no state (status); "
        "78 configuration error.",
        see_also=("xcecli", "systemctl", "cloud-init"),
    ),
    Program(
        "xce-controller",
        "xce-controller",
        "reference controller of the XCE elastic-host lifecycle",
        _controller,
        environment=(
            ("XCE_CONTROLLER_TLS_CERT", "serve --tls-cert: the PEM certificate chain."),
            ("XCE_CONTROLLER_TLS_KEY", "serve --tls-key: its unencrypted PEM key."),
            ("XCE_CONTROLLER_TLS_CLIENT_CA", "serve --tls-client-ca: the clients' PEM CA."),
        ),
        files=(
            ("/etc/xce/controller.yaml", "The cluster config of the packaged service."),
            ("/var/lib/xce-controller", "The database and the tokens it generated."),
        ),
        exit_status="0 success; 1 runtime failure; 2 usage error; 78 configuration error.",
        see_also=("xcecli", "xce-agent"),
    ),
    Program(
        "xcecli",
        "xce-controller",
        "admin command line of the XCE reference controller",
        _xcecli,
        environment=(
            ("XCE_CONTROLLER_URL", "The controller (default http://127.0.0.1:7870)."),
            ("XCE_ADMIN_TOKEN", "The admin token."),
            ("XCE_ADMIN_TOKEN_FILE", "A file holding it, such as DB.admin-token."),
            ("XCE_CONTROLLER_TIMEOUT", "How long to wait for the controller's answer."),
            ("XCE_CONTROLLER_CA_FILE", "The CA bundle that signed the controller's certificate."),
            ("XCE_CLIENT_CERT_FILE", "The client certificate shown to the controller."),
            ("XCE_CLIENT_KEY_FILE", "Its key."),
        ),
        exit_status="0 success (with --wait: the host got there); 1 the controller refused, "
        "or the host ended elsewhere; 2 usage error; 3 the controller could not be reached; "
        "130 --wait interrupted (Ctrl-C; what was asked still stands).",
        see_also=("xce-controller", "xce-agent"),
    ),
    Program(
        "xce-provisioner",
        "xce-provisioner",
        "reference provisioner of XCE elastic hosts, through Redfish",
        _provisioner,
        environment=(
            ("XCE_LEASE_NAME", "The lease it runs under (the agent sets it)."),
            (
                "XCE_LEASE_TOKEN",
                "The lease's fencing token, carried by every step; the controller refuses a "
                "step whose token is not current.",
            ),
        ),
        files=(
            (
                "/etc/xce/provisioner.yaml",
                "The config (--config): the controller, the BMCs (credentials in files), "
                "the machines.",
            ),
        ),
        exit_status="0 stopped; 2 a problem of the config or the command line; 75 the "
        "controller said the lease belongs to another holder now.",
        see_also=("xce-agent", "xcecli"),
    ),
)


# -- what a command says about itself ---------------------------------------------------------


def commands(group: click.Group) -> Iterator[tuple[str, click.Command]]:
    """Every verb of a group, sorted; hidden ones left out."""
    for name in sorted(group.commands):
        command = group.commands[name]
        if not getattr(command, "hidden", False):
            yield name, command


def usage(prog: str, command: click.Command) -> str:
    ctx = click.Context(command, info_name=prog)
    return f"{prog} {' '.join(command.collect_usage_pieces(ctx))}".strip()


def options(command: click.Command) -> list[tuple[str, str]]:
    """(`--flag VALUE`, help with its default) for each option, as --help shows them."""
    ctx = click.Context(command)
    rows = []
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option):
            continue  # arguments are in the usage line
        record = param.get_help_record(ctx)
        if record is not None:
            rows.append((record[0], " ".join(record[1].split())))
    return rows


def text_of(command: click.Command) -> str:
    return " ".join((command.help or "").split("\b")[0].split())


# -- man pages ---------------------------------------------------------------------------------


def _roff(text: str) -> str:
    """Text safe in a roff line: backslashes and hyphens escaped, no leading dot."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text.startswith((".", "'")) else text


def _date() -> str:
    """The build's date (SOURCE_DATE_EPOCH, which dpkg and rpm set: reproducible), else none."""
    import os
    import time

    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    return time.strftime("%Y-%m-%d", time.gmtime(int(epoch))) if epoch.isdigit() else ""


def man_page(program: Program, version: str) -> str:
    group = program.load()
    lines = [
        f'.TH {program.name.upper()} 1 "{_date()}" "{program.package} {version}" "User Commands"',
        ".SH NAME",
        f"{_roff(program.name)} \\- {_roff(program.summary)}",
        ".SH SYNOPSIS",
        f".B {_roff(program.name)}",
        "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]",
        ".SH DESCRIPTION",
        _roff(text_of(group)),
    ]
    group_options = options(group)
    if group_options:
        lines.append(".SH OPTIONS")
        for flag, help_text in group_options:
            lines += [".TP", f".B {_roff(flag)}", _roff(help_text)]
    lines.append(".SH COMMANDS")
    for name, command in commands(group):
        lines += [".TP", f".B {_roff(usage(program.name + ' ' + name, command))}"]
        lines.append(_roff(text_of(command)))
        for flag, help_text in options(command):
            if flag == "--help":
                continue  # every command has it; the OPTIONS section says so once
            lines += [".RS", ".TP", f".B {_roff(flag)}", _roff(help_text or "-"), ".RE"]
    for title, entries in (("ENVIRONMENT", program.environment), ("FILES", program.files)):
        if entries:
            lines.append(f".SH {title}")
            for key, what in entries:
                lines += [".TP", f".{'B' if title == 'ENVIRONMENT' else 'I'} {_roff(key)}"]
                lines.append(_roff(what))
    lines += [".SH EXIT STATUS", _roff(program.exit_status), ".SH SEE ALSO"]
    lines.append(",\n".join(f".BR {_roff(page)} (1)" for page in program.see_also))
    return "\n".join(lines) + "\n"


# -- shell completion --------------------------------------------------------------------------

SHELLS = {
    "bash": ("bash", "{prog}"),
    "zsh": ("zsh", "_{prog}"),
    "fish": ("fish", "{prog}.fish"),
}


def completion(program: Program, shell: str) -> str:
    """click's completion script for `shell`. The script speaks the protocol of the click it
    was made with (click 7 and 8 differ), so a package made in the target distribution's
    buildroot completes with that distribution's click."""
    var = f"_{program.name.replace('-', '_').upper()}_COMPLETE"
    try:
        from click.shell_completion import get_completion_class
    except ImportError:  # click 7 (RHEL 9, Debian 11)
        import importlib

        old: Any = importlib.import_module("click._bashcomplete")
        return str(old.get_completion_script(program.name, var, shell)) + "\n"
    cls = get_completion_class(shell)
    assert cls is not None, shell
    return cls(program.load(), {}, program.name, var).source() + "\n"


# -- the reference -----------------------------------------------------------------------------


def config_keys(load: Callable[[Path], Any], sample: str, tmp: Path) -> list[tuple[str, str]]:
    """(key path, what it expects) for every key the checker asks for, from a sample that has
    one of each nested section: the checker is recorded, not a list kept by hand."""
    from xce_protocol import validation
    from xce_protocol.errors import ConfigError
    from xce_provisioner.config import ConfigError as ProvisionerConfigError

    seen: dict[str, str] = {}
    original_get, original_allowed = validation.Checker._get, validation.Checker.allowed_keys

    def recording_get(self: Any, parent: Any, key: str, path: str, expected: str, req: bool) -> Any:
        where = validation.join_path(path, key)
        if not seen.get(where):
            seen[where] = expected + (" (required)" if req else "")
        return original_get(self, parent, key, path, expected, req)

    def recording_allowed(self: Any, node: Any, path: str, allowed: Any) -> None:
        for key in allowed:
            seen.setdefault(validation.join_path(path, key), "")
        original_allowed(self, node, path, allowed)

    tmp.write_text(sample)
    with contextlib.ExitStack() as stack:  # (no parenthesised with: Python 3.9 builds too)
        stack.enter_context(mock.patch.object(validation.Checker, "_get", recording_get))
        stack.enter_context(
            mock.patch.object(validation.Checker, "allowed_keys", recording_allowed)
        )
        # Only the keys asked for count (the provisioner has its own ConfigError).
        stack.enter_context(contextlib.suppress(ConfigError, ProvisionerConfigError))
        load(tmp)
    named = {
        key.replace("roles.worker", "roles.ROLE").replace("[0]", "[N]"): what
        for key, what in seen.items()
    }
    return sorted(named.items())


AGENT_SAMPLE = """\
version: 1
controller: {url: "https://controller.example:7870", token: t}
instance: {id: i-1, template: default}
cloud: {provider: aws}
metrics: {textfile: /nonexistent/xce.prom}
roles:
  worker:
    components:
      NAME:
        command: [/bin/true]
        restart: {give_up: {starts: 1, window: 1s}}
        limits: {memory_max: 1G}
        liveness_probe: {command: [/bin/true]}
        singleton: {lease: NAME}
"""
CONTROLLER_SAMPLE = """\
version: 1
templates:
  NAME: {slots: 1, resources: {}}
defaults: {}
auth: {}
notices: {}
limits: {}
"""


PROVISIONER_SAMPLE = """\
controller: {url: "https://controller.example:7870", token_file: /nonexistent/token}
bmcs:
  NAME: {url: "https://bmc.example"}
machines:
  - {name: node1, instance_id: i-1, template: default, bmc: NAME, system: /redfish/v1/Systems/1}
"""


def _provisioner_config(path: Path) -> Any:
    from xce_provisioner.config import load

    return load(path)


def _agent_config(path: Path) -> Any:
    from xce_agent.config.agent import load_config

    return load_config(path, path.parent / "no-instance-data")


def _cluster_config(path: Path) -> Any:
    from xce_controller.core.config import load_cluster_config

    return load_cluster_config(path)


def reference(tmp: Path) -> str:
    out = [
        "# Reference: every command and config key",
        "",
        "Generated from the code by `packaging/python/clidocs.py reference docs/reference.md`;",
        "a test regenerates it and fails when it differs. What each does and why is in",
        "[operations.md](operations.md) (the agent), [controller.md](controller.md) and",
        "[provisioner.md](provisioner.md). A key",
        "marked (required) must be there once the mapping it belongs to is.",
        "",
    ]
    for program in PROGRAMS:
        group = program.load()
        out += [f"## `{program.name}`", "", text_of(group), ""]
        out += _option_table(options(group))
        for name, command in commands(group):
            out += [f"### `{usage(program.name + ' ' + name, command)}`", "", text_of(command), ""]
            out += _option_table(options(command))
    for title, load, sample in (
        ("Agent config (`/etc/xce/agent.yaml`)", _agent_config, AGENT_SAMPLE),
        ("Cluster config (`xce-controller serve --config`)", _cluster_config, CONTROLLER_SAMPLE),
        (
            "Provisioner config (`xce-provisioner run --config`)",
            _provisioner_config,
            PROVISIONER_SAMPLE,
        ),
    ):
        out += [f"## {title}", "", "| key | expects |", "|---|---|"]
        for key, expects in config_keys(load, sample, tmp):
            out.append(f"| `{key}` | {_cell(expects) or SEE_DOCS} |")
        out.append("")
    out.append(
        "`NAME` stands for a name you choose (a component, a template, a lease); `ROLE` for a "
        "role (worker, provisioner, reverse-proxy); `[N]` for each item of a list."
    )
    return "\n".join(out) + "\n"


SEE_DOCS = "checked by its own parser: see the docs"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _option_table(rows: list[tuple[str, str]]) -> list[str]:
    if not rows:
        return []
    table = ["| option | |", "|---|---|"]
    table += [f"| `{_cell(flag)}` | {_cell(help_text)} |" for flag, help_text in rows]
    return [*table, ""]


def version() -> str:
    from xce_controller import __version__

    return __version__


def main(argv: list[str]) -> int:
    known = ("man", "completion", "reference")
    if not argv or argv[0] not in known or (argv[0] != "reference" and len(argv) < 2):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    what, target = argv[0], Path(argv[1]) if len(argv) > 1 else None
    if what == "reference":
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            text = reference(Path(tmp) / "config.yaml")
        if target is None:
            sys.stdout.write(text)
        else:
            target.write_text(text)
        return 0
    assert target is not None
    for program in PROGRAMS:
        if what == "man":
            target.mkdir(parents=True, exist_ok=True)
            (target / f"{program.name}.1").write_text(man_page(program, version()))
            continue
        for shell, (folder, pattern) in SHELLS.items():
            (target / folder).mkdir(parents=True, exist_ok=True)
            (target / folder / pattern.format(prog=program.name)).write_text(
                completion(program, shell)
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
