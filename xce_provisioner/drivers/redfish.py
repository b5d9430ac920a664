"""Power through Redfish, with the `sushy` client (the library Ironic drives bare metal with).

One driver is one management endpoint (a BMC, or an aggregator such as sushy-tools' emulator)
and the systems behind it, each named by its path (`/redfish/v1/Systems/ID`). Credentials are
read from files (never from the config itself); TLS is verified against the system's CA store
or a CA file; the client keeps a Redfish session (falling back to basic auth where the BMC has
no session service) and is made again after any failure, so a BMC restart or an expired
session costs one failed read. Every call is bounded: a connect and a read timeout, and a few
retries of reads only: a reset is sent once (its answer may be lost after the BMC acted; the
provisioner's journal decides whether to ask again). Every failure becomes a DriverError with
a `bmc_*` reason code.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from xce_protocol.reasons import Reason
from xce_provisioner.drivers.base import DriverError, Power, Request
from xce_provisioner.drivers.bounded import AnswerTooLarge, BoundedAdapter, Redirected

log = logging.getLogger(__name__)
T = TypeVar("T")
SECRET_LIMIT = 4096


@dataclass(frozen=True)
class RedfishSettings:
    url: str
    username_file: Path | None = None
    password_file: Path | None = None
    ca_file: Path | None = None  # None: the system's CA store
    timeout: float = 10.0  # seconds, for the connection and for each answer
    read_retries: int = 2  # further tries of a read after a connection failure
    auth: str = "session"  # session (basic auth where there is no session service), basic


def read_secret(path: Path) -> str:
    """A credential file's first line; DriverError (bmc_auth_failed) when unreadable."""
    try:
        with open(path, "rb") as f:
            data = f.read(SECRET_LIMIT + 1)
    except OSError as exc:
        raise DriverError(Reason.BMC_AUTH_FAILED, f"{path}: {exc.strerror}") from None
    if len(data) > SECRET_LIMIT:
        raise DriverError(Reason.BMC_AUTH_FAILED, f"{path}: larger than {SECRET_LIMIT} bytes")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise DriverError(Reason.BMC_AUTH_FAILED, f"{path}: not UTF-8 text") from None
    lines = text.splitlines()
    return lines[0].strip() if lines else ""


def classify(exc: BaseException) -> DriverError:
    """The reason code of anything the client raised (a hostile BMC raises anything)."""
    import requests
    from sushy import exceptions as sx

    if isinstance(exc, DriverError):
        return exc
    text = str(exc)[:300]
    if isinstance(exc, sx.ConnectionError):
        cause = exc.__context__
        if isinstance(cause, requests.exceptions.SSLError):
            return DriverError(Reason.BMC_TLS_FAILED, text)
        if isinstance(cause, AnswerTooLarge):
            return DriverError(Reason.BMC_BAD_ANSWER, text)
        if isinstance(cause, Redirected):
            return DriverError(Reason.BMC_REFUSED, str(cause)[:300])
        if isinstance(cause, requests.exceptions.Timeout):
            return DriverError(Reason.BMC_TIMEOUT, text)
        return DriverError(Reason.BMC_UNREACHABLE, text)
    if isinstance(exc, sx.AccessError):
        return DriverError(Reason.BMC_AUTH_FAILED, text)
    if isinstance(exc, sx.ResourceNotFoundError):
        return DriverError(Reason.BMC_NOT_FOUND, text)
    if isinstance(exc, sx.ServerSideError):
        return DriverError(Reason.BMC_FAILED, text)
    if isinstance(exc, sx.HTTPError):
        return DriverError(Reason.BMC_REFUSED, text)
    if isinstance(exc, ValueError):  # JSON that is not (requests' decode error is both)
        return DriverError(Reason.BMC_BAD_ANSWER, f"malformed answer: {text}")
    if isinstance(exc, requests.exceptions.Timeout):
        return DriverError(Reason.BMC_TIMEOUT, text)
    if isinstance(exc, requests.exceptions.RequestException):
        return DriverError(Reason.BMC_UNREACHABLE, text)
    return DriverError(Reason.BMC_BAD_ANSWER, f"{type(exc).__name__}: {text}")


_POWER_STATES = {"on": Power.ON, "off": Power.OFF}


class RedfishDriver:
    """A PowerDriver over one Redfish endpoint."""

    def __init__(
        self,
        settings: RedfishSettings,
        connect: Callable[[RedfishSettings], Any] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self._connect = connect or _sushy_root
        self._sleep = sleep
        self._root: Any = None

    def _client(self) -> Any:
        if self._root is None:
            self._root = self._connect(self.settings)
        return self._root

    def _call(self, what: Callable[[Any], T], retries: int) -> T:
        for attempt in range(retries + 1):
            try:
                return what(self._client())
            except Exception as exc:  # a BMC can make the client raise anything
                error = classify(exc)
                self._drop()
                transient = error.code in (Reason.BMC_UNREACHABLE, Reason.BMC_TIMEOUT)
                if not transient or attempt == retries:
                    raise error from None
                self._sleep(min(1.0, 0.2 * (attempt + 1)))
        raise AssertionError("unreachable")

    def power(self, system: str) -> Power:
        def read(root: Any) -> Power:
            state = _own(system, root.get_system(system)).power_state
            value = str(getattr(state, "value", state) or "").lower()
            return _POWER_STATES.get(value, Power.UNKNOWN)

        return self._call(read, self.settings.read_retries)

    def request(self, system: str, what: Request) -> None:
        import sushy

        def reset(root: Any) -> None:
            target = _own(system, root.get_system(system))
            _own_reset(system, target)
            if what is Request.ON:
                value = sushy.RESET_ON
            elif what is Request.SHUTDOWN:
                value = sushy.RESET_GRACEFUL_SHUTDOWN
            elif what is Request.FORCE_OFF:
                value = sushy.RESET_FORCE_OFF
            else:
                off = str(getattr(target.power_state, "value", "")).lower() == "off"
                value = sushy.RESET_ON if off else sushy.RESET_FORCE_RESTART
            target.reset_system(value)

        self._call(reset, 0)  # never resent: the BMC may have acted on a lost answer

    def _drop(self) -> None:
        root, self._root = self._root, None
        if root is not None:
            _close_quietly(root)

    def close(self) -> None:
        self._drop()


def _own(system: str, target: Any) -> Any:
    """The system document, if it is the one asked for: an aggregator or a BMC answering with
    another system's document would have one machine's decision read or act on another."""
    said = target.json.get("@odata.id") if isinstance(target.json, dict) else None
    if said is not None and str(said).rstrip("/") != system.rstrip("/"):
        raise DriverError(
            Reason.BMC_BAD_ANSWER, f"asked for {system}, answered {str(said)[:200]!r}"
        )
    return target


def _own_reset(system: str, target: Any) -> None:
    """The reset action's target lies under the system's own path (not another system's)."""
    from urllib.parse import urlsplit

    uri = str(target._get_reset_action_element().target_uri)
    if not urlsplit(uri).path.startswith(system.rstrip("/") + "/"):
        raise DriverError(
            Reason.BMC_BAD_ANSWER,
            f"the reset of {system} names a target outside it: {uri[:200]!r} (not sent)",
        )


def _close_quietly(root: Any) -> None:
    auth = getattr(root, "_auth", None)
    try:
        if auth is not None:
            auth.close()  # ends the Redfish session at the BMC
    except Exception as exc:  # a BMC that cannot end a session loses nothing of ours
        log.debug("closing the Redfish session failed: %s", exc)


def _sushy_root(s: RedfishSettings) -> Any:
    import sushy
    from sushy import auth as sushy_auth

    from xce_provisioner.drivers.once import OnceConnector

    user = read_secret(s.username_file) if s.username_file else None
    password = read_secret(s.password_file) if s.password_file else None

    class NoAuth(sushy_auth.AuthBase):  # type: ignore[misc]
        """No credentials configured (an open emulator): send none, not `None:None`."""

        def _do_authenticate(self) -> None:
            pass

        def can_refresh_session(self) -> bool:
            return False

    auth: Any
    if user is None and password is None:
        auth = NoAuth()
    elif s.auth == "basic":
        auth = sushy_auth.BasicAuth(user, password)
    else:
        auth = sushy_auth.SessionOrBasicAuth(user, password)
    verify = str(s.ca_file) if s.ca_file else True
    try:
        conn = OnceConnector(
            s.url,
            verify=verify,
            default_request_timeout=s.timeout,
            connect_timeout=s.timeout,
            server_side_retries=1,  # one try of each (0 would mean sushy's default, 3)
            server_side_retries_delay=0,
        )
        adapter = BoundedAdapter(s.timeout)  # each answer: in `timeout`, and capped in size
        conn._session.trust_env = False  # no proxy nor ~/.netrc from the environment: a BMC's
        # credentials go to the BMC's url only
        conn._session.mount("https://", adapter)
        conn._session.mount("http://", adapter)
        return sushy.Sushy(s.url, verify=verify, auth=auth, connector=conn)
    except Exception as exc:
        raise classify(exc) from None
