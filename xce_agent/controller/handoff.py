"""What the agent hands the worker: the template file, a credential file and their variables.

The worker's environment names files, never a secret: `XCE_TEMPLATE_FILE` (the join answer's
template) and `XCE_CREDENTIAL_FILE` (the token the worker uses for its own requests, that is
its job reports).

The template is readable by the worker's user only: owned by that user, mode 0400 (root-owned
0600 when the worker runs as root). The state directory stays closed to everyone else: mode
0710 with the worker user's group, so that group may pass through it to the template but list
nothing and read nothing else (state.json, output pipes and the lock are 0600 root).

The credential is not on disk at all: it is an anonymous in-memory file (memfd) the worker
inherits as a descriptor, and `XCE_CREDENTIAL_FILE` is its path `/dev/fd/N`. Only the process
holding the descriptor can open it, so a job that runs as the worker's own user finds nothing
to read once the worker has read the token and closed the descriptor (and made itself
non-dumpable, so /proc/PID/fd of the worker is closed to it too).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from xce_agent.config.agent import ControllerConfig
from xce_agent.supervision.output import OutputPipe
from xce_agent.supervision.process import Handle, ProcessRunner
from xce_agent.supervision.spec import ComponentSpec
from xce_agent.system.reader import Reader
from xce_protocol.atomic_file import write_atomic

log = logging.getLogger(__name__)

TEMPLATE_FILE = "template.json"
OLD_CREDENTIAL_FILE = "credential"  # not written any more; removed if an older agent left it


def tls_environment(ctl: ControllerConfig | None) -> dict[str, str]:
    """The worker's variables for the controller's TLS, from the agent's own settings:
    the CA it trusts, and the client certificate and key it shows (absolute paths, since the
    worker may run elsewhere; files the worker's user must be able to read)."""
    if ctl is None:
        return {}
    env = {}
    if ctl.ca_file:
        env["XCE_CONTROLLER_CA_FILE"] = os.path.abspath(ctl.ca_file)
    if ctl.client_cert_file and ctl.client_key_file:
        env["XCE_CONTROLLER_CLIENT_CERT_FILE"] = os.path.abspath(ctl.client_cert_file)
        env["XCE_CONTROLLER_CLIENT_KEY_FILE"] = os.path.abspath(ctl.client_key_file)
    return env


class Handoff:
    def __init__(
        self,
        directory: Path,
        reader: Reader,
        controller_url: str,
        credential: str | None,
        tls: Mapping[str, str] | None = None,
    ) -> None:
        self.directory = directory
        self.reader = reader
        self.controller_url = controller_url
        self.tls = dict(tls or {})  # tls_environment(): the worker reaches it as the agent does
        self.credential = credential
        self.template_path = directory / TEMPLATE_FILE
        self._credential_fd: int | None = None
        self._template: str | None = None  # the last template written, to restore it

    def open_directory(self) -> None:
        """Let the worker's user through the state directory (0710), nobody else.

        Without a worker user it is closed again (0700 root), in case an earlier config had one.
        """
        if os.geteuid() != 0:
            return
        if self.reader.uid is None:
            os.chown(self.directory, 0, 0)
            os.chmod(self.directory, 0o700)
            return
        gid = self.reader.gid if self.reader.gid is not None else 0
        os.chown(self.directory, 0, gid)
        os.chmod(self.directory, 0o710)  # noqa: S103 - traverse only, for the worker's group

    def write_template(self, doc: Mapping[str, Any]) -> None:
        self._template = json.dumps(dict(doc), indent=2) + "\n"
        self._write(self.template_path, self._template)

    def restore_template(self) -> None:
        """Write the template again if it was removed or changed under the agent.

        The worker reads it at every start: without it a restarted worker fails at once,
        and its crash loop would stop it for good.
        """
        if self._template is None:
            return
        try:
            if self.template_path.read_text(encoding="utf-8") == self._template:
                return
        except (OSError, UnicodeDecodeError):
            pass
        log.warning("%s was removed or changed: writing it again", self.template_path)
        self._write(self.template_path, self._template)

    def credential_fd(self) -> int | None:
        """The descriptor of the in-memory credential file (made once), or None without one."""
        if not self.credential:
            return None
        if self._credential_fd is None:
            with contextlib.suppress(FileNotFoundError):
                (self.directory / OLD_CREDENTIAL_FILE).unlink()
            fd = os.memfd_create("xce-credential", os.MFD_CLOEXEC)
            os.write(fd, (self.credential + "\n").encode())
            self._credential_fd = fd
        return self._credential_fd

    def set_credential(self, credential: str | None) -> None:
        """A join issued the worker a new credential: the next worker start gets it."""
        if credential == self.credential:
            return
        self.close()
        self.credential = credential

    def fds(self) -> tuple[int, ...]:
        fd = self.credential_fd()
        return () if fd is None else (fd,)

    def close(self) -> None:
        if self._credential_fd is not None:
            os.close(self._credential_fd)
            self._credential_fd = None

    def _write(self, path: Path, text: str) -> None:
        uid = self.reader.uid if os.geteuid() == 0 else None
        write_atomic(path, text, mode=0o400 if uid is not None else 0o600, owner=uid)

    def env(self, host: str, instance_id: str) -> dict[str, str] | None:
        """The worker's variables, or None while there is no template from a join yet."""
        try:
            doc = json.loads(self.template_path.read_text())
            template = doc.get("template", {})
            name, slots = str(template.get("name", "")), str(template.get("slots", 1))
        except (OSError, ValueError, AttributeError, RecursionError):
            return None
        env = {
            "XCE_TEMPLATE_FILE": str(self.template_path),
            "XCE_HOST_NAME": host,
            "XCE_INSTANCE_ID": instance_id,
            "XCE_CONTROLLER_URL": self.controller_url,
            "XCE_TEMPLATE": name,
            "XCE_SLOTS": slots,
        }
        env.update(self.tls)
        fd = self.credential_fd()
        if fd is not None:
            env["XCE_CREDENTIAL_FILE"] = f"/dev/fd/{fd}"
        return env


class HandoffRunner(ProcessRunner):
    """Real processes, and before each start of a worker-role component its template is put
    back if it was removed or changed under the agent."""

    def __init__(self, handoff: Handoff, roles: Iterable[str], **runner: Any) -> None:
        super().__init__(**runner)  # whatever ProcessRunner takes (owner, ...)
        self.handoff = handoff
        self.roles = frozenset(roles)

    def spawn(self, spec: ComponentSpec, output: OutputPipe | None) -> Handle:
        if spec.role in self.roles:
            try:
                self.handoff.restore_template()
            except OSError as exc:  # the start goes ahead; the worker says what it lacks
                log.error("cannot write %s: %s", self.handoff.template_path, exc.strerror)
        return super().spawn(spec, output)
