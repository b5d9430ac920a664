"""A `requests` transport that bounds each answer of a management endpoint in time and size.

`requests`' read timeout bounds each wait for bytes, not the answer: a BMC that drips a byte
every second keeps a call going for as long as it likes, and `sushy` reads a whole answer into
memory, so one that never ends grows the provisioner without bound. Mounted on the client's
session, this reads the body itself with a deadline and a size cap. The header phase is still
bounded only per read (by the read timeout).
"""

from __future__ import annotations

import time
from typing import Any

import requests
import requests.adapters

ANSWER_LIMIT = 8 * 1024 * 1024  # bytes: a Redfish resource is kilobytes


class AnswerTooLarge(requests.exceptions.RequestException):
    """The endpoint's answer passed the size cap."""


class BoundedAdapter(requests.adapters.HTTPAdapter):
    def __init__(self, seconds: float, limit: int = ANSWER_LIMIT) -> None:
        super().__init__()
        self.seconds = seconds
        self.limit = limit

    def send(
        self,
        request: Any,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> requests.Response:
        end = time.monotonic() + self.seconds
        response = super().send(request, True, timeout, verify, cert, proxies)
        body = bytearray()
        try:
            while True:
                if time.monotonic() > end:
                    raise requests.exceptions.ReadTimeout(
                        f"the answer took longer than {self.seconds:g} s", request=request
                    )
                chunk = response.raw.read1(65536)
                if not chunk:
                    break
                body += chunk
                if len(body) > self.limit:
                    raise AnswerTooLarge(
                        f"the answer is larger than {self.limit} bytes", request=request
                    )
        except BaseException:
            response.close()
            raise
        response._content = bytes(body)
        setattr(response, "_content_consumed", True)  # noqa: B010 (private to requests)
        response.close()
        return response
