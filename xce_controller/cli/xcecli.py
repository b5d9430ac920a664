"""`xcecli`: the admin CLI of the reference controller (the name the brief uses).

Exit codes: 0 ok; 1 the controller refused (its message printed as one line); 2 usage;
3 the controller could not be reached. The client raises typed errors; the group
(xce_protocol.exits) turns each into its line and exit code.

The verbs live in modules by what they are about (hosts shown, hosts acted on, jobs, the
cluster's templates and leases, events and stories); this module is the group and its
options.
"""

from __future__ import annotations

import os
import sys

import click

from xce_controller import __version__
from xce_controller.cli import cluster_views, host_actions, host_views, job_verbs
from xce_controller.cli.client import Client
from xce_controller.cli.client_tls import client_tls
from xce_controller.cli.observe import events, why
from xce_protocol import names
from xce_protocol.durations import Duration
from xce_protocol.errors import UsageError
from xce_protocol.exits import ErrorExits


@click.group(cls=ErrorExits, name="xcecli")
@click.version_option(__version__, prog_name="xcecli")
@click.option(
    "--url",
    envvar="XCE_CONTROLLER_URL",
    default="http://127.0.0.1:7870",
    show_default=True,
    help="Controller URL, or its replicas' URLs separated by commas ($XCE_CONTROLLER_URL).",
)
@click.option(
    "--token", envvar="XCE_ADMIN_TOKEN", default="", help="Admin token ($XCE_ADMIN_TOKEN)."
)
@click.option(
    "--token-file",
    envvar="XCE_ADMIN_TOKEN_FILE",
    type=click.Path(dir_okay=False),
    help="File holding the admin token ($XCE_ADMIN_TOKEN_FILE), such as the DB.admin-token "
    "file `xce-controller serve` writes when the config sets none.",
)
@click.option(
    "--timeout",
    envvar="XCE_CONTROLLER_TIMEOUT",
    type=Duration(minimum=0.1, maximum=3600),
    default="30s",
    show_default=True,
    help="How long to wait for the controller's answer, like 5s ($XCE_CONTROLLER_TIMEOUT).",
)
@click.option(
    "--ca-file",
    envvar="XCE_CONTROLLER_CA_FILE",
    type=click.Path(dir_okay=False),
    help="PEM CA bundle that signed the controller's certificate ($XCE_CONTROLLER_CA_FILE); "
    "default: the system's.",
)
@click.option(
    "--client-cert-file",
    envvar="XCE_CLIENT_CERT_FILE",
    type=click.Path(dir_okay=False),
    help="PEM certificate shown to a controller that requires one ($XCE_CLIENT_CERT_FILE).",
)
@click.option(
    "--client-key-file",
    envvar="XCE_CLIENT_KEY_FILE",
    type=click.Path(dir_okay=False),
    help="Its unencrypted PEM key ($XCE_CLIENT_KEY_FILE).",
)
@click.pass_context
def main(
    ctx: click.Context,
    url: str,
    token: str,
    token_file: str | None,
    timeout: float,
    ca_file: str | None,
    client_cert_file: str | None,
    client_key_file: str | None,
) -> None:
    """Admin CLI of the XCE reference controller."""
    if token_file and not token:
        try:
            with open(token_file, encoding="utf-8") as handle:
                token = handle.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise UsageError(f"--token-file {token_file}: {why}") from None
    if token and not names.is_bearer_token(token):  # no header carries it (never shown)
        raise UsageError("--token: expected printable ASCII characters without spaces")
    ctx.obj = Client(url, token, timeout, client_tls(ca_file, client_cert_file, client_key_file))
    # Its connections closed with the command, however it ends (an older urllib3 leaves one
    # cut mid-answer open otherwise).
    ctx.call_on_close(ctx.obj.session.close)


for _command in (
    host_views.hosts,
    host_views.host,
    host_views.expected,
    host_views.to_return,
    host_actions.expect,
    host_actions.open_,
    host_actions.close,
    host_actions.decommission,
    job_verbs.jobs,
    job_verbs.cancel,
    job_verbs.submit,
    cluster_views.templates,
    cluster_views.leases,
    events,
    why,
):
    main.add_command(_command)

if __name__ == "__main__":
    main(prog_name=os.path.basename(sys.argv[0]))
