"""Who presents which bearer in tests that speak the API for hosts and admins alike.

A host presents the join token on its first join and, from then on, the credential its join
answer returned (heartbeats, notices, watches, job reports, rejoins); everyone else presents
the admin token. `Bearers` remembers each host's credential per controller port.
"""

from __future__ import annotations

from typing import Any

import requests

HOST_CALLS = ("heartbeat", "notice", "watch", "jobs")


class Bearers:
    def __init__(self, admin: str, join: str) -> None:
        self.admin = admin
        self.join = join
        self.held: dict[tuple[str, str], str] = {}  # (controller url, host) -> credential

    def headers(self, url: str, path: str, body: Any) -> dict[str, str]:
        parts = path.split("?", maxsplit=1)[0].split("/")
        if path == "/v1/join":
            held = self.held.get((url, str((body or {}).get("host"))))
            return {"Authorization": f"Bearer {held or self.join}"}
        if len(parts) > 4 and parts[2] == "hosts" and parts[4] in HOST_CALLS:
            return {"Authorization": f"Bearer {self.held.get((url, parts[3]), '')}"}
        return {"Authorization": f"Bearer {self.admin}"}

    def call(
        self, url: str, method: str, path: str, body: Any = None, timeout: float = 10
    ) -> requests.Response:
        """The request, with the caller's bearer; a join's answer leaves its credential."""
        headers = self.headers(url, path, body)
        r = requests.request(method, url + path, json=body, headers=headers, timeout=timeout)
        if path == "/v1/join" and r.status_code == 200:
            self.held[(url, r.json()["host"])] = r.json()["credential"]
        return r
