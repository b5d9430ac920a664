"""Asking each provider's metadata service: one Source per item the watcher follows.

A Source's `observe()` makes the requests one reading needs and returns what the item
announces now, or raises MetadataError / MetadataGarbage. It keeps the provider's session
state: the AWS IMDSv2 token (refreshed before it expires, never replaced by IMDSv1), the GCE
ETag of the last value (so the next request waits for a change), the Azure VM name.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from xce_agent.notices import aws, azure, gce
from xce_agent.notices.fetch import MetadataError, MetadataHttp, Reply
from xce_agent.notices.observed import MetadataGarbage, Observed

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 2.0  # a metadata service on the host answers in milliseconds
LONG_POLL = 60  # GCE timeout_sec; the client waits a little longer, never less
TOKEN_REFRESH = 60.0  # renew the AWS token when this little of its life is left
AZURE_FIRST_CALL = 120.0  # Azure: the first call enables Scheduled Events and may take 2 min
_TOKEN = re.compile(rb"[\x21-\x7e]+")
_ETAG = re.compile(r"[A-Za-z0-9]{1,64}")  # GCE's are hex; it goes back into a URL

DEFAULT_URLS = {
    # Addresses, not names: resolving a name has no timeout the watcher could bound.
    "aws": "http://169.254.169.254",
    "gce": "http://169.254.169.254",
    "azure": "http://169.254.169.254",
}


class Source(Protocol):
    name: str
    long_poll: bool  # True: observe() itself waits for a change

    def observe(self) -> list[Observed]: ...


class ImdsSession:
    """The IMDSv2 token shared by the AWS sources; thread-safe."""

    def __init__(
        self, http: MetadataHttp, base: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.http = http
        self.base = base
        self.clock = clock
        self._lock = threading.Lock()
        self._token = ""
        self._expires = 0.0

    def token(self) -> str:
        with self._lock:
            if not self._token or self._expires - self.clock() <= TOKEN_REFRESH:
                self._renew()
            return self._token

    def drop(self, token: str) -> None:
        with self._lock:
            if self._token == token:
                self._token = ""

    def _renew(self) -> None:
        started = self.clock()
        reply = self.http.request(
            "PUT",
            self.base + aws.TOKEN_PATH,
            {aws.TOKEN_TTL_HEADER: str(aws.TOKEN_TTL)},
            REQUEST_TIMEOUT,
            body=b"",
        )
        token = reply.body.strip()
        if reply.status != 200 or not token or len(token) > 1024:
            # No fallback to IMDSv1: an unauthenticated read is what IMDSv2 exists to refuse.
            raise MetadataGarbage(f"IMDSv2 token request answered HTTP {reply.status}")
        if not _TOKEN.fullmatch(token):
            # Kept, a token no header can carry would fail every read until it expired (1 h).
            raise MetadataGarbage("IMDSv2 token is not printable ASCII without spaces")
        self._token = token.decode("ascii")
        self._expires = started + aws.token_ttl(reply.header(aws.TOKEN_TTL_HEADER))

    def get(self, path: str) -> Reply:
        """GET with the token; a 401 (expired or unknown token) gets one fresh token."""
        for attempt in range(2):
            token = self.token()
            reply = self.http.request(
                "GET", self.base + path, {aws.TOKEN_HEADER: token}, REQUEST_TIMEOUT
            )
            if reply.status != 401 or attempt:
                return reply
            self.drop(token)
        raise AssertionError("unreachable")


class AwsSource:
    long_poll = False

    def __init__(
        self, session: ImdsSession, path: str, parse: Callable[[int, bytes], list[Observed]]
    ) -> None:
        self.session = session
        self.path = path
        self.parse = parse
        self.name = "aws " + path.rsplit("/meta-data/", 1)[-1]

    def observe(self) -> list[Observed]:
        reply = self.session.get(self.path)
        return self.parse(reply.status, reply.body)


def aws_sources(http: MetadataHttp, base: str) -> list[Source]:
    session = ImdsSession(http, base)
    return [
        AwsSource(session, aws.SPOT_PATH, aws.parse_spot),
        AwsSource(session, aws.REBALANCE_PATH, aws.parse_rebalance),
        AwsSource(session, aws.SCHEDULED_PATH, aws.parse_scheduled),
    ]


class GceSource:
    """Long-polls one key: `last_etag=0` first (the current value at once), then waits."""

    long_poll = True

    def __init__(
        self,
        http: MetadataHttp,
        base: str,
        key: str,
        parse: Callable[[str], list[Observed]],
        wait: int = LONG_POLL,
    ) -> None:
        self.http = http
        self.base = base
        self.key = key
        self.parse = parse
        self.wait = wait
        self.name = "gce " + key
        self.etag = "0"

    def observe(self) -> list[Observed]:
        url = (
            f"{self.base}{gce.PREFIX}{self.key}?wait_for_change=true"
            f"&last_etag={self.etag}&timeout_sec={self.wait}"
        )
        headers = {gce.FLAVOR_HEADER: gce.FLAVOR}
        reply = self.http.request("GET", url, headers, self.wait + REQUEST_TIMEOUT + 3.0)
        value = gce.value_of(reply.status, reply.header(gce.FLAVOR_HEADER), reply.body, self.key)
        found = self.parse(value)
        etag = reply.header("ETag") or ""
        if not _ETAG.fullmatch(etag):
            # The value is the metadata server's (it said Metadata-Flavor): act on it, and
            # without a usable ETag ask for the current value each time (paced like a poll).
            self.etag = "0"
            raise MetadataGarbage(f"{self.key}: answer without a usable ETag", found)
        self.etag = etag
        return found


def gce_sources(http: MetadataHttp, base: str) -> list[Source]:
    return [
        GceSource(http, base, gce.PREEMPTED_KEY, gce.parse_preempted),
        GceSource(http, base, gce.MAINTENANCE_KEY, gce.parse_maintenance),
    ]


class AzureSource:
    long_poll = False
    name = "azure scheduledevents"

    def __init__(self, http: MetadataHttp, base: str) -> None:
        self.http = http
        self.base = base
        self.vm_name = ""
        self._headers: Mapping[str, str] = {azure.HEADER: "true"}
        self._enabled = False  # an answer came: the service is on for this VM
        self._alone: set[str] = set()  # events of the last reading naming this VM alone
        self._lock = threading.Lock()

    def observe(self) -> list[Observed]:
        if not self.vm_name:
            self.vm_name = self._name()
        reply = self.http.request(
            "GET",
            f"{self.base}{azure.EVENTS_PATH}?api-version={azure.API_VERSION}",
            self._headers,
            REQUEST_TIMEOUT if self._enabled else AZURE_FIRST_CALL,
        )
        try:
            found = azure.parse_events(reply.status, reply.body, self.vm_name)
        except MetadataGarbage as exc:
            self._remember(exc.observed or [])
            raise
        self._enabled = True
        self._remember(found)
        return found

    def _remember(self, found: list[Observed]) -> None:
        with self._lock:
            self._alone = {o.event_id for o in found if o.approvable}

    def acknowledge(self, event_ids: list[str]) -> bool:
        """Approve events (StartRequests); True once settled: the platform took the approval,
        or the events are not this VM's alone to approve (that would release them for the
        other VMs they name, or this VM's name is unknown), so they never will be."""
        with self._lock:
            others = [e for e in event_ids if e not in self._alone]
        if others:
            log.warning(
                "not approving scheduled event %s: it names other VMs (or this VM's name is"
                " unknown), and approving it would release it for them too",
                ", ".join(others),
            )
            event_ids = [e for e in event_ids if e not in others]
            if not event_ids:
                return True
        try:
            reply = self.http.request(
                "POST",
                f"{self.base}{azure.EVENTS_PATH}?api-version={azure.API_VERSION}",
                {**self._headers, "Content-Type": "application/json"},
                REQUEST_TIMEOUT,
                body=azure.start_requests(event_ids),
            )
        except MetadataError as exc:
            log.warning("could not approve scheduled events %s: %s", ", ".join(event_ids), exc)
            return False
        if reply.status != 200:
            log.warning("approving scheduled events answered HTTP %d", reply.status)
            return False
        log.info("approved scheduled events %s", ", ".join(event_ids))
        return True

    def _name(self) -> str:
        """This VM's name, to skip events for other VMs; "" (take all) while unknown."""
        try:
            reply = self.http.request(
                "GET",
                f"{self.base}{azure.NAME_PATH}?api-version={azure.NAME_API_VERSION}&format=text",
                self._headers,
                REQUEST_TIMEOUT,
            )
        except MetadataError:
            return ""
        name = reply.body.decode("utf-8", "replace").strip()
        return name if reply.status == 200 and 0 < len(name) <= 64 else ""


def sources_for(provider: str, http: MetadataHttp, base: str = "") -> list[Source]:
    """What to follow for a provider (aws, gce, azure); base overrides its address."""
    url = base or DEFAULT_URLS[provider]
    if provider == "aws":
        return aws_sources(http, url)
    if provider == "gce":
        return gce_sources(http, url)
    if provider == "azure":
        return [AzureSource(http, url)]
    raise ValueError(f"no metadata sources for provider {provider!r}")
