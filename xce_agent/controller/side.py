"""The agent's objects that talk to the controller, each made on first use.

An agent without a controller never loads the HTTP code. With one, the link is made when the
membership machine first opens it, the notice sender on the first cloud notice, and the lease
calls use a client of their own (so a singleton's renewal never queues behind a heartbeat).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xce_agent.config.agent import ControllerConfig
from xce_agent.controller.credential import CredentialStore, HostCredential
from xce_agent.controller.handoff import Handoff
from xce_agent.controller.reports import Reports
from xce_agent.core import membership as ms
from xce_agent.supervision.boot import boot_id
from xce_protocol.notices import Notice, NoticeKind

if TYPE_CHECKING:
    from xce_agent.controller.client import ControllerClient
    from xce_agent.controller.link import ControllerLink
    from xce_agent.controller.notice_sender import NoticeSender

log = logging.getLogger(__name__)

LAST_REPORT_TIMEOUT = 2.0  # a planned stop's last heartbeat: it delays the agent's exit
SHUTDOWN_CALL_TIMEOUT = 4.0  # the shutdown notice and the final report: well inside the
# unit's stop timeout, and short enough that the components still get theirs


class ControllerSide:
    """Owns the link, the notice sender and the lease client; runs on the event loop."""

    def __init__(
        self,
        config: ControllerConfig | None,
        host: str,
        instance_id: str,
        handoff: Handoff,
        stored: HostCredential | None,
        credentials: CredentialStore,
        reports: Reports,
        post: Callable[[ms.Event], None],
    ) -> None:
        self._config = config
        self._host = host
        self._instance_id = instance_id
        self._handoff = handoff
        self._stored = stored
        self._credentials = credentials
        self._reports = reports
        self._post = post
        self.link: ControllerLink | None = None
        self.sender: NoticeSender | None = None
        self.lease_client: ControllerClient | None = None

    def credential(self) -> HostCredential | None:
        """The host credential the link holds now (none before the first join)."""
        return self.link.client.credential if self.link is not None else None

    def open_link(self) -> ControllerLink:
        if self.link is None:
            assert self._config is not None, "the membership machine opens no link without one"
            # Imported here: an agent without a controller never loads the HTTP code.
            from xce_agent.controller.client import ControllerClient
            from xce_agent.controller.link import ControllerLink
            from xce_protocol.protocol import Identity

            me = Identity(self._host, self._instance_id)
            client = ControllerClient(self._config, me)
            self.lease_client = ControllerClient(self._config, me)
            # Resume with the stored credential only while the template of its join is here
            # (a resumed host gets no template); else join afresh.
            if self._handoff.env(self._host, self._instance_id) is not None:
                client.credential = self._stored
            self.link = ControllerLink(
                client,
                self._post,
                self._reports.join,
                self._reports.heartbeat,
                credentials=self._credentials,
            )
        return self.link

    def send_notice(self, notice: Notice) -> None:
        if self.sender is None:
            from xce_agent.controller.notice_sender import NoticeSender

            self.sender = NoticeSender(self.open_link().client, self._instance_id)
            self.sender.start()
        self.sender.send(notice)

    def announce_shutdown(self) -> None:
        """The system is going down: the shutdown notice, then the final report."""
        from xce_agent.controller.notice_sender import notice_payload

        notice = Notice(NoticeKind.SHUTDOWN, "os", f"shutdown-{boot_id()}", None)
        payload: dict[str, Any] = notice_payload(notice, self._instance_id)
        self.open_link().announce_shutdown(payload, SHUTDOWN_CALL_TIMEOUT)

    def last_report(self, timeout: float) -> None:
        """One heartbeat now, bounded by `timeout`: after a planned stop, the controller sees
        the worker stopped and the agent stopped (the link is stopped right after)."""
        if self.link is None:
            return
        try:
            self.link.client.heartbeat(self._reports.heartbeat(), timeout)
        except Exception:  # the stop goes on: the report is a courtesy
            log.exception("last report to the controller failed")

    def check_threads(self) -> None:
        if self.link is not None:
            self.link.check_threads()

    def confirm(self) -> None:
        if self.link is not None:
            self.link.confirm()

    def report_now(self) -> None:
        if self.link is not None:
            self.link.report_now()  # the controller closes the host at once

    def stop(self) -> None:
        if self.sender is not None:
            self.sender.stop()
        if self.link is not None:
            self.link.stop()
