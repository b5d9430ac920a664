"""`xce-controller`: serve the reference controller, print its OpenAPI, run the simulator.

Commands raise typed errors; the group (xce_protocol.exits) prints each as one line and exits
with its code: 1 runtime failure, 2 usage, 78 (EX_CONFIG) config error.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import signal
import sqlite3
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from xce_controller import __version__
from xce_controller.cli.store_verbs import copy_store, migrate, sqlite_file
from xce_controller.core.config import ClusterConfig, load_cluster_config
from xce_controller.store.base import SchemaTooNew, StorageUnavailable
from xce_controller.store.open import describe, is_postgres
from xce_protocol.errors import ConfigError, UsageError, XceError
from xce_protocol.exits import ErrorExits


def _config(path: Path | None) -> ClusterConfig:
    return load_cluster_config(path)


@click.group(cls=ErrorExits, name="xce-controller")
@click.version_option(__version__, prog_name="xce-controller")
def main() -> None:
    """Reference controller of the XCE elastic-host lifecycle."""


@main.command()
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="Cluster config.")
@click.option(
    "--db",
    required=True,
    help="SQLite database file, or a PostgreSQL connection string (postgresql://... or "
    "key=value pairs) that any number of replicas share.",
)
@click.option("--listen", default="127.0.0.1:7870", show_default=True, help="HOST:PORT.")
@click.option("--port-file", type=click.Path(path_type=Path), help="Write the bound port here.")
@click.option(
    "--tls-cert",
    type=click.Path(path_type=Path),
    envvar="XCE_CONTROLLER_TLS_CERT",
    help="Serve HTTPS with this PEM certificate chain ($XCE_CONTROLLER_TLS_CERT).",
)
@click.option(
    "--tls-key",
    type=click.Path(path_type=Path),
    envvar="XCE_CONTROLLER_TLS_KEY",
    help="The certificate's unencrypted PEM key ($XCE_CONTROLLER_TLS_KEY).",
)
@click.option(
    "--tls-client-ca",
    type=click.Path(path_type=Path),
    envvar="XCE_CONTROLLER_TLS_CLIENT_CA",
    help="Require client certificates signed by this PEM CA ($XCE_CONTROLLER_TLS_CLIENT_CA).",
)
def serve(
    config_file: Path | None,
    db: str,
    listen: str,
    port_file: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_client_ca: Path | None,
) -> None:
    """Serve the REST API (HTTPS with --tls-cert and --tls-key) until SIGTERM; SIGHUP reloads
    the config and the certificate."""
    from xce_controller.http import tls
    from xce_controller.http.server import (
        bind,
        make_server,
        raise_open_files,
        stable_admin_token,
        stable_token,
        token_file,
    )

    cfg = _config(config_file)
    tls_files = tls.tls_files(tls_cert, tls_key, tls_client_ca)
    if tls_files is not None:
        tls.check(tls_files)
    host, port_text = _where(cfg, listen, db)
    logging.basicConfig(level=logging.INFO, format=log_format(os.environ))
    step = f"cannot listen on {listen}"
    try:
        if not cfg.admin_token:
            path = Path(db)
            step = f"cannot keep the admin token in {token_file(path)}"
            made = (*cfg.generated_tokens, "admin")
            cfg = replace(cfg, admin_token=stable_admin_token(path), generated_tokens=made)
            click.echo(f"xce-controller: admin token in {token_file(path)}", err=True)
        if not cfg.join_token:  # joins always need one: the cluster's, kept like the admin's
            path = Path(db)
            step = f"cannot keep the join token in {token_file(path, 'join')}"
            made = (*cfg.generated_tokens, "join")
            cfg = replace(cfg, join_token=stable_token(path, "join"), generated_tokens=made)
            click.echo(f"xce-controller: join token in {token_file(path, 'join')}", err=True)
        step = f"cannot listen on {listen}"
        raise_open_files()  # systemd's 1024 is about a thousand agents' watches
        sock = bind(host, int(port_text))
        step = f"cannot open the database {describe(db)}"
        server, controller = make_server(cfg, db, sock, tls_files)
        controller.tune_gc = True
    except (OSError, sqlite3.Error, StorageUnavailable, SchemaTooNew) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise XceError(f"{step}: {why}") from exc
    port = sock.getsockname()[1]
    if port_file:
        port_file.write_text(f"{port}\n")
    scheme = "https" if tls_files else "http"
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"xce-controller: listening on {scheme}://{shown}:{port}", err=True)

    def reload() -> None:
        # The config and the certificate, each checked first; a bad one is logged and the
        # running one kept.
        controller.reload_config(lambda: load_cluster_config(config_file))
        tls.reload(server.config.ssl, tls_files)

    async def serve_with_reload() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload)
        await server.serve(sockets=[sock])

    run_loop(serve_with_reload())


def _where(cfg: ClusterConfig, listen: str, db: str) -> tuple[str, str]:
    """The host and port to listen on, once the config may serve there with this store."""
    host, _, port_text = listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port_text.isdigit():
        raise UsageError(f"--listen: expected HOST:PORT, got {listen!r}")
    if not cfg.admin_token and not _loopback(host):
        raise ConfigError(
            [
                "auth.admin_token: expected a configured token when listening beyond "
                f"loopback, got none (--listen {listen})"
            ]
        )
    if is_postgres(db):
        # Replicas must agree on the tokens: a token made by one would be unknown to the rest.
        missing = [f"auth.{k}" for k in ("admin_token", "join_token") if not getattr(cfg, k)]
        if missing:
            why = "expected a configured token with a shared (PostgreSQL) store, got none"
            raise ConfigError([f"{m}: {why}" for m in missing])
    return host, port_text


def log_format(environ: Mapping[str, str]) -> str:
    """Under systemd the journal stamps each line; anywhere else the line carries its time."""
    fmt = "%(levelname)s %(name)s: %(message)s"
    return fmt if environ.get("JOURNAL_STREAM") else "%(asctime)s " + fmt


def run_loop(main: Any) -> None:
    """uvloop when it is installed (it roughly halves the cost of a request), else asyncio."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    if hasattr(uvloop, "run"):
        uvloop.run(main)
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())  # uvloop < 0.18 (Debian 12)
    asyncio.run(main)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@main.command()
@click.option("--db", type=click.Path(), required=True, help="SQLite database (not PostgreSQL).")
@click.argument("out", type=click.Path(path_type=Path))
def backup(db: str, out: Path) -> None:
    """Copy the database to OUT while it serves; the copy is checked by replay."""
    from xce_controller.store import backup as b

    try:
        checked = b.backup(sqlite_file(db, "backup"), out)
    except b.BackupError as exc:
        raise XceError(str(exc)) from None
    click.echo(f"{out}: backup of {db} ({checked})")


@main.command()
@click.option("--db", type=click.Path(), required=True, help="SQLite database (not PostgreSQL).")
@click.argument("source", type=click.Path(path_type=Path))
def restore(db: str, source: Path) -> None:
    """Put a backup in place of the database (its controller stopped)."""
    from xce_controller.store import backup as b

    file = sqlite_file(db, "restore")
    try:
        checked = b.restore(source, file)
    except b.BackupError as exc:
        raise XceError(str(exc)) from None
    kept = file.with_name(file.name + b.BEFORE_RESTORE)
    before = f"; the database before is in {kept}" if kept.exists() else ""
    click.echo(f"{file}: restored from {source} ({checked}){before}")


@main.command()
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="Cluster config.")
def validate(config_file: Path | None) -> None:
    """Check a cluster config; print every problem or "ok"."""
    _config(config_file)
    click.echo(f"{config_file or 'built-in config'}: ok")


@main.command()
@click.option("--onprem", is_flag=True, help="The on-premise story: Redfish power (a minute).")
def demo(onprem: bool) -> None:
    """Show the elastic-host lifecycle end to end on this machine (about 20 s)."""
    if onprem:
        from xce_controller.sim.demo_onprem import run_onprem_demo

        sys.exit(run_onprem_demo(click.echo))
    from xce_controller.sim.demo import run_demo

    sys.exit(run_demo(click.echo))


@main.command()
def openapi() -> None:
    """Print the OpenAPI document of the REST API."""
    import tempfile

    from xce_controller.http.api import create_app
    from xce_controller.service import Controller
    from xce_controller.store.sqlite import Store

    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "db")
        doc = create_app(Controller(load_cluster_config(None), store)).openapi()
        store.close()
    click.echo(json.dumps(doc, indent=2, sort_keys=True))


@main.command()
@click.argument("scenario", type=click.Path(path_type=Path))
@click.option("--csv", "csv_path", type=click.Path(path_type=Path), help="Write every fact.")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path),
    help="Draw hosts by state and jobs by outcome over virtual time (PNG; needs matplotlib).",
)
def simulate(scenario: Path, csv_path: Path | None, plot_path: Path | None) -> None:
    """Drive the lifecycle in virtual time and print a summary table."""
    from xce_controller.sim.report import plot
    from xce_controller.sim.scenario import load_scenario
    from xce_controller.sim.simulate import run_scenario

    spec = load_scenario(scenario)
    if plot_path is not None:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise ConfigError([f"--plot {plot_path}: expected matplotlib installed, got none"])
    summary = run_scenario(spec, csv_path)
    if plot_path is not None:
        plot(summary, plot_path)
    click.echo(summary.render())


main.add_command(migrate)
main.add_command(copy_store)
