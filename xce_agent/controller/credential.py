"""The host credential the controller issued at join, kept in the state directory (0600).

It is what lets an agent restart or a reboot carry on as the same incarnation of the host
without a second join. It is bound to the host name, the instance id and the controller URL
it was issued for: a copy under another identity (a reused image, a changed config) is not
presented, so that host joins afresh with its join token. With a list of URLs (the
controller's replicas) the credential is the cluster's: it is kept while the config still
lists the URL it was stored with (the first of the list at the time), whichever replica
issued it.

Every secret is checked against what it must be on the wire (an HTTP header value: printable
ASCII without spaces, at most MAX_SECRET characters) when it arrives and when it is read back:
a credential with CR/LF once made every later request fail inside the agent, so no heartbeat
or rejoin was ever sent again. One that arrives bad fails its answer; one stored bad is dropped
and the host joins again with its join token.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xce_protocol.atomic_file import write_atomic

log = logging.getLogger(__name__)

CREDENTIAL_FILE = "credential.json"
MAX_SECRET = 512
_WIRE = re.compile(r"[!-~]+")  # printable ASCII, no space: a header value sent as it is


@dataclass(frozen=True)
class HostCredential:
    host: str
    instance_id: str
    controller_url: str
    incarnation: int
    secret: str = field(repr=False)
    worker_secret: str = field(default="", repr=False)  # the worker's, for its own calls


def sendable(value: Any) -> bool:
    """The value can be sent as a bearer token exactly as it is."""
    return isinstance(value, str) and len(value) <= MAX_SECRET and bool(_WIRE.fullmatch(value))


def _secret(value: Any) -> str | None:
    return value if sendable(value) else None


def unusable(body: dict[str, Any], joining: bool) -> str:
    """Why the credentials an answer issues could not be sent later; "" when they can.

    A join must issue both the host's and the worker's; a renewal may leave either out (the
    ones held are kept), but what it does send must be sendable."""
    rule = f"printable ASCII without spaces, at most {MAX_SECRET} characters"
    for key in ("credential", "worker_credential"):
        if key not in body and not joining:
            continue
        if key not in body:
            return f"without a {key.replace('_', ' ')}"
        if not sendable(body[key]):
            return f"with a {key.replace('_', ' ')} that is not {rule}"
    return ""


def from_answer(
    body: dict[str, Any],
    host: str,
    instance_id: str,
    url: str,
    previous: HostCredential | None = None,
) -> HostCredential | None:
    """The credential a join (or renewing heartbeat) answer carries; None when it carries
    none (a controller before protocol 1.1). A renewal keeps the worker's credential."""
    secret = _secret(body.get("credential"))
    if secret is None:
        return None
    incarnation = body.get("incarnation")
    if not isinstance(incarnation, int) or isinstance(incarnation, bool):
        incarnation = 0
    worker = _secret(body.get("worker_credential"))
    if worker is None:
        worker = previous.worker_secret if previous is not None else ""
    return HostCredential(host, instance_id, url, incarnation, secret, worker)


class CredentialStore:
    def __init__(self, directory: Path) -> None:
        self.path = directory / CREDENTIAL_FILE

    def peek(self) -> HostCredential | None:
        """The stored credential, whoever it was issued to; None if none or unreadable."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return HostCredential(**data)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, RecursionError) as exc:  # nested past the stack
            log.error("%s: unreadable host credential ignored (%s)", self.path, type(exc).__name__)
            return None

    def load(self, host: str, instance_id: str, urls: tuple[str, ...]) -> HostCredential | None:
        """The stored credential if it was issued to this identity and can be sent; None
        otherwise (one that cannot be sent is dropped: the host joins with its join token)."""
        cred = self.peek()
        if cred is None:
            return None
        if not sendable(cred.secret) or not (
            cred.worker_secret == "" or sendable(cred.worker_secret)
        ):
            log.error(
                "%s: stored host credential cannot be sent (not printable ASCII without spaces):"
                " dropped, joining again",
                self.path,
            )
            self.clear()
            return None
        if (cred.host, cred.instance_id) != (host, instance_id) or cred.controller_url not in urls:
            log.info(
                "host credential was issued to %s/%s at %s, not this host: joining afresh",
                cred.host,
                cred.instance_id,
                cred.controller_url,
            )
            return None
        return cred

    def save(self, cred: HostCredential) -> None:
        data = {
            "host": cred.host,
            "instance_id": cred.instance_id,
            "controller_url": cred.controller_url,
            "incarnation": cred.incarnation,
            "secret": cred.secret,
            "worker_secret": cred.worker_secret,
        }
        write_atomic(self.path, json.dumps(data, indent=2) + "\n", mode=0o600)

    def clear(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
