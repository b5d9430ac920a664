"""HTTPS for `xce-controller serve`: the certificate and key, checked before the server starts
and read again on SIGHUP, so a renewed certificate is taken without a restart.

uvicorn builds the server's SSLContext from the same files; checking them here first turns a
missing file, a key that does not match the certificate or an unreadable PEM into one line and
exit 78 (a config error: systemd does not restart into it), instead of a traceback at start.
Reloading loads the new pair into uvicorn's context: connections already open keep the
certificate they were made with, new handshakes get the new one; a bad pair is logged and the
running one kept, as for the config.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xce_protocol.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TlsFiles:
    cert: Path  # PEM: the server's certificate, then any intermediates
    key: Path  # PEM: its private key, unencrypted (the service starts unattended)
    client_ca: Path | None = None  # PEM: when set, clients must show a certificate it signed


def tls_files(cert: Path | None, key: Path | None, client_ca: Path | None) -> TlsFiles | None:
    """The options as given; None for plain HTTP. Half a pair is a config error."""
    if cert is None and key is None:
        if client_ca is not None:
            raise ConfigError(
                [f"--tls-client-ca {client_ca}: expected --tls-cert and --tls-key with it"]
            )
        return None
    if cert is None or key is None:
        given, missing = ("--tls-cert", "--tls-key") if cert else ("--tls-key", "--tls-cert")
        raise ConfigError([f"{given}: expected {missing} with it, got none"])
    return TlsFiles(cert, key, client_ca)


def _why(exc: Exception) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError) and exc.strerror:
        return exc.strerror
    text = str(getattr(exc, "reason", "") or exc).replace("_", " ").lower()
    return text or type(exc).__name__


def check(files: TlsFiles) -> None:
    """Raise ConfigError naming the file and the problem unless the pair (and CA) load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for path in (files.cert, files.key):
        if not path.is_file():
            raise ConfigError([f"{path}: expected a readable PEM file, got none"])
    try:
        context.load_cert_chain(str(files.cert), str(files.key))
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ConfigError(
            [f"--tls-cert {files.cert} --tls-key {files.key}: cannot load them ({_why(exc)})"]
        ) from None
    if files.client_ca is not None:
        try:
            context.load_verify_locations(cafile=str(files.client_ca))
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise ConfigError(
                [f"--tls-client-ca {files.client_ca}: cannot load it ({_why(exc)})"]
            ) from None


def uvicorn_options(files: TlsFiles | None) -> dict[str, Any]:
    if files is None:
        return {}
    options: dict[str, Any] = {"ssl_certfile": str(files.cert), "ssl_keyfile": str(files.key)}
    if files.client_ca is not None:
        options["ssl_ca_certs"] = str(files.client_ca)
        options["ssl_cert_reqs"] = ssl.CERT_REQUIRED
    return options


def reload(context: ssl.SSLContext | None, files: TlsFiles | None) -> bool:
    """Load the pair again into the running server's context; False (logged) if it fails."""
    if context is None or files is None:
        return True
    try:
        check(files)
        context.load_cert_chain(str(files.cert), str(files.key))
    except (ConfigError, OSError, ssl.SSLError) as exc:
        log.error("certificate not reloaded, keeping the running one: %s", exc)
        return False
    log.info("certificate reloaded from %s", files.cert)
    return True
