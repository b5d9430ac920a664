"""The agent's side of cloud notices: the provider watcher, the worker told, the platform released.

Owns the provider watcher; each notice it reports becomes a membership event (`Noticed`) on
the event loop, and the membership machine decides what follows: `RelayNotice` (here: the
notice file and each component's notice_signal), `SendNotice` (to the controller) and, once
the controller says the host is drained for an Azure scheduled event, `ApproveEvent` (here:
StartRequests, so the platform need not wait for the event's NotBefore time). A notice the
controller still acts on that the watcher, having read every item, no longer sees is ended
(`stale_end`): it ended while no agent watched.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from xce_agent.config.cloud import CloudConfig
from xce_agent.notices.relay import NoticeRelay
from xce_agent.notices.watcher import Watcher, watcher_for
from xce_protocol.notices import MAX_TEXT, Notice, NoticeKind, NoticeState

log = logging.getLogger(__name__)


class CloudNotices:
    def __init__(
        self, config: CloudConfig, relay: NoticeRelay, seen: Callable[[Notice], None]
    ) -> None:
        self.config = config
        self.relay = relay
        self.seen = seen  # called on a watcher thread
        self.watcher: Watcher | None = None
        self._unapproved: set[str] = set()  # Azure events to approve once drained
        self._approving: set[str] = set()  # approvals in flight
        self._ended: set[str] = set()  # events the controller held that were said to be over
        self._lock = threading.Lock()  # the sets: the loop adds, approval threads settle

    def start(self) -> None:
        if self.config.provider == "none":
            if self.config.note:
                log.warning("cloud: %s", self.config.note)
            elif self.config.detected:
                log.info("cloud %s has no notices to watch", self.config.detected)
            return
        self.watcher = watcher_for(self.config, self.seen)
        if self.watcher is not None:
            self.watcher.start()

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()

    def tell_components(self, notice: Notice) -> None:
        """The notice file and each component's notice_signal (on the event loop)."""
        self.relay.relay(notice)
        if notice.state is NoticeState.ACTIVE:
            self._ended.discard(notice.event_id)
        if notice.provider == "azure":
            with self._lock:
                if notice.state is NoticeState.ACTIVE:
                    self._unapproved.add(notice.event_id)
                else:
                    self._unapproved.discard(notice.event_id)

    def approve(self, event_id: str) -> None:
        """Approve an Azure event (on a thread of its own: it is an HTTP request). One that
        failed is tried again at the next answer saying the host is drained."""
        with self._lock:
            if event_id not in self._unapproved or event_id in self._approving:
                return
            if self.watcher is None:
                return
            self._approving.add(event_id)
        watcher = self.watcher
        threading.Thread(
            target=self._acknowledge, args=(watcher, event_id), name="notice-approve", daemon=True
        ).start()

    def _acknowledge(self, watcher: Watcher, event_id: str) -> None:
        settled = watcher.acknowledge([event_id])
        with self._lock:
            self._approving.discard(event_id)
            if settled:
                self._unapproved.discard(event_id)

    def stale_end(self, event_id: str, kind: str) -> Notice | None:
        """The end of a notice the controller acts on but the provider no longer announces,
        once: it ended while no agent watched (a restart, an upgrade) or its end was never
        delivered, and the host would otherwise stay closed for good."""
        watcher = self.watcher
        if watcher is None or not watcher.ready() or event_id in self._ended:
            return None
        if len(event_id) > MAX_TEXT:
            return None
        try:
            notice_kind = NoticeKind(kind)
        except ValueError:
            return None
        if notice_kind in (NoticeKind.SHUTDOWN, NoticeKind.STOP) or watcher.tracker.knows(event_id):
            return None
        self._ended.add(event_id)
        return Notice(notice_kind, self.config.provider, event_id, None, NoticeState.ENDED)
