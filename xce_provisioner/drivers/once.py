"""sushy's connector with the resends and the off-origin requests taken out.

sushy's `Connector` sends a request again on its own in two cases that would reset a machine
twice for one decision: after a 401 it renews the session and repeats the request, and it
repeats a POST whose error reads like a BMC that is not ready yet (iDRAC's `SYS518`, iLO's
`InvalidOperationForSystemState`), when the reset may already be queued. Here only reads are
repeated after a renewed session, and no request is repeated for its error text; a reset is
sent once and a failure goes back to the provisioner's journal, which decides.

And every request stays on the endpoint's own origin (scheme, host, port): a document may
name any URL (a reset action's `target`, an `@odata.id`), and sushy would send the session's
token there.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urljoin, urlsplit

from sushy.connector import Connector

from xce_protocol.reasons import Reason
from xce_provisioner.drivers.base import DriverError

_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or _PORTS.get(scheme)
    except ValueError:  # a port that is no number
        port = -1
    return scheme, (parts.hostname or "").lower(), port


class OnceConnector(Connector):  # type: ignore[misc]
    def check_retry_on_exception(self, exception_msg: Any) -> bool:
        return False  # never repeat a request for what its error says

    def _op(self, method: str, path: str = "", *args: Any, **kwargs: Any) -> Any:
        url = path if urlsplit(path).netloc else urljoin(self._url, path)
        if origin(url) != origin(self._url):
            raise DriverError(
                Reason.BMC_BAD_ANSWER,
                f"the endpoint named another origin: {url[:200]!r} (not followed)",
            )
        if method.upper() != "GET":
            kwargs["allow_reauth"] = False  # a 401'd reset is not repeated on a new session
        return super()._op(method, path, *args, **kwargs)
