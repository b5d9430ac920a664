"""`xcecli --ca-file --client-cert-file --client-key-file`: how the CLI trusts a controller
whose certificate a private CA signed, and shows its own certificate to one that requires
client certificates (`serve --tls-client-ca`).

The files are loaded into an SSL context before any request, so a missing file, a file that is
not PEM or a key that does not match its certificate is one line and exit 2 (a usage error),
instead of a TLS failure that blames the controller. What requests is then given is passed on
every request, because requests lets REQUESTS_CA_BUNDLE override a session's own `verify`.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from xce_protocol.errors import UsageError


@dataclass(frozen=True)
class ClientTls:
    verify: str | bool = True  # a CA bundle's path, or True: the system's (or REQUESTS_CA_BUNDLE)
    cert: tuple[str, str] | None = None  # (certificate, key) shown when the controller asks

    def request_options(self) -> dict[str, object]:
        options: dict[str, object] = {}
        if self.verify is not True:
            options["verify"] = self.verify
        if self.cert is not None:
            options["cert"] = self.cert
        return options


def _why(exc: Exception) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError) and exc.strerror:
        return exc.strerror
    text = str(getattr(exc, "reason", "") or exc).replace("_", " ").lower()
    return text or type(exc).__name__


def client_tls(ca_file: str | None, cert_file: str | None, key_file: str | None) -> ClientTls:
    """The options as given, each file checked; UsageError naming the option otherwise."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca_file:
        try:
            context.load_verify_locations(cafile=ca_file)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise UsageError(f"--ca-file {ca_file}: cannot load it ({_why(exc)})") from None
    if bool(cert_file) != bool(key_file):
        given, missing = (
            ("--client-cert-file", "--client-key-file")
            if cert_file
            else ("--client-key-file", "--client-cert-file")
        )
        raise UsageError(f"{given}: expected {missing} with it, got none")
    cert: tuple[str, str] | None = None
    if cert_file and key_file:

        def encrypted() -> str:  # called only for an encrypted key (never prompts)
            raise UsageError(f"--client-key-file {key_file}: expected an unencrypted key")

        try:
            context.load_cert_chain(cert_file, key_file, password=encrypted)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise UsageError(
                f"--client-cert-file {cert_file} --client-key-file {key_file}: "
                f"cannot load them ({_why(exc)})"
            ) from None
        cert = (cert_file, key_file)
    return ClientTls(ca_file or True, cert)
