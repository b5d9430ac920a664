"""`xce-provisioner`: `run --config F` (the component the agent's provisioner role runs),
`check --config F` (the config's problems, all at once). The only place exceptions become
exit codes: 0 stopped, 2 a config or usage mistake, 75 the lease moved to another holder."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

import click

from xce_protocol import names
from xce_provisioner import __version__
from xce_provisioner.config import Config, ConfigError, load
from xce_provisioner.controller import ControllerClient, Lease
from xce_provisioner.drivers.base import DriverError, PowerDriver
from xce_provisioner.drivers.redfish import RedfishDriver, read_secret
from xce_provisioner.runner import Fenced, Runner

EX_CONFIG = 2
EX_TEMPFAIL = 75
log = logging.getLogger("xce_provisioner")


def _config(path: str) -> Config:
    try:
        return load(Path(path))
    except ConfigError as exc:
        for problem in exc.problems:
            click.echo(f"xce-provisioner: {problem}", err=True)
        sys.exit(EX_CONFIG)


def _lease() -> Lease:
    name = os.environ.get("XCE_LEASE_NAME", "")
    token = os.environ.get("XCE_LEASE_TOKEN", "")
    if not name:
        if token:  # half a lease: a fence the operator meant to have, silently not there
            click.echo(
                "xce-provisioner: XCE_LEASE_TOKEN is set but XCE_LEASE_NAME is not: "
                "set both (under a lease) or neither (by hand)",
                err=True,
            )
            sys.exit(EX_CONFIG)
        return Lease()
    if not names.is_lease_token(token):  # as the controller reads it: "02", "²" are not
        click.echo(
            f"xce-provisioner: XCE_LEASE_TOKEN: expected an integer from 0 to "
            f"{names.LEASE_TOKEN_MAX} in plain decimal, got {token[:40]!r}",
            err=True,
        )
        sys.exit(EX_CONFIG)
    return Lease(name, int(token))


@click.group()
@click.version_option(__version__, prog_name="xce-provisioner")
def main() -> None:
    """The reference provisioner: powers the on-premise machines of its inventory on and off,
    through their BMCs' Redfish service, as the controller's records of them say: on when a
    machine is expected, a graceful shutdown (forced off after a timeout) and the return when
    it was decommissioned or lost, one power cycle when it is overdue for its join. It runs as
    the component of an xce-agent's provisioner role, under its lease."""


_CONFIG = click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="The provisioner's config (like /etc/xce/provisioner.yaml).",
)


@main.command()
@_CONFIG
def check(config_path: str) -> None:
    """Check the config; print its problems."""
    cfg = _config(config_path)
    click.echo(f"{config_path}: {len(cfg.machines)} machines, {len(cfg.bmcs)} BMCs")


@main.command()
@_CONFIG
def run(config_path: str) -> None:
    """Reconcile the machines' power with the controller's records until stopped."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    cfg = _config(config_path)
    try:
        token = read_secret(cfg.controller.token_file)
    except DriverError as exc:
        click.echo(f"xce-provisioner: controller.token_file: {exc.message}", err=True)
        sys.exit(EX_CONFIG)
    lease = _lease()
    client = ControllerClient(cfg.controller, token, lease)
    drivers: dict[str, PowerDriver] = {name: RedfishDriver(s) for name, s in cfg.bmcs.items()}
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    log.info(
        "running: %d machines, lease %s token %d", len(cfg.machines), lease.name or "-", lease.token
    )
    try:
        status = os.environ.get("XCE_STATUS_FILE")  # the agent's: `xce-agent status` shows it
        Runner(cfg, client, drivers, status_file=Path(status) if status else None).run(stop)
    except Fenced as exc:
        log.error("stopping: %s", exc)
        sys.exit(EX_TEMPFAIL)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for driver in drivers.values():
            driver.close()
        client.close()
