"""The status page's sign-in: server-side sessions, a throttle on guesses, and an Origin check.

A browser gives the admin or read-only token once (/ui/login) and gets a cookie holding a
random session id, never anything derived from the token: a leaked cookie is worth one
session, until it expires (SESSION_TTL), its user signs out, or the token it was opened with
changes (a reload with a new token ends every session opened with the old one). Sessions are
kept in memory: a controller restart signs everyone out. Guesses at the login form are
throttled per client address, and a login posted from another origin is refused, so a foreign
page cannot sign a browser in with a token of its choosing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

SESSION_TTL = 8 * 3600.0  # seconds a session lasts from its login
MAX_SESSIONS = 1000  # the oldest ends first beyond this
LOGIN_ATTEMPTS = 10  # per client address ...
LOGIN_WINDOW = 60.0  # ... in this many seconds, successful ones included
MAX_CLIENTS = 10_000  # addresses tracked by the throttle; the oldest forgotten first


@dataclass(frozen=True)
class Session:
    role: str  # "admin" or "reader"
    proof: str  # keyed digest of the token it was opened with (never the token)
    expires: float  # monotonic


class Sessions:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._key = secrets.token_bytes(32)  # per process: a restart ends every session
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._attempts: OrderedDict[str, list[float]] = OrderedDict()

    def _proof(self, token: str) -> str:
        return hmac.new(self._key, token.encode(), hashlib.sha256).hexdigest()

    def open(self, role: str, token: str) -> str:
        """A new session for the bearer of `token`; its id (the cookie's value)."""
        sid = secrets.token_urlsafe(32)
        self._sessions[sid] = Session(role, self._proof(token), self.clock() + SESSION_TTL)
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return sid

    def role(self, sid: str, tokens: dict[str, str]) -> str:
        """The role of a live session ("" for none); `tokens` is each role's current token.
        A session whose token is no longer its role's ends here."""
        session = self._sessions.get(sid) if sid else None
        if session is None:
            return ""
        current = tokens.get(session.role, "")
        fresh = self.clock() < session.expires
        if not fresh or not current or not hmac.compare_digest(self._proof(current), session.proof):
            del self._sessions[sid]
            return ""
        return session.role

    def close(self, sid: str) -> None:
        self._sessions.pop(sid, None)

    def __len__(self) -> int:
        return len(self._sessions)

    def attempt(self, client: str) -> float:
        """Count a login attempt from `client`: 0 if it may go on, else seconds to wait."""
        now = self.clock()
        recent = [t for t in self._attempts.pop(client, []) if now - t < LOGIN_WINDOW]
        if len(recent) >= LOGIN_ATTEMPTS:
            self._attempts[client] = recent
            return LOGIN_WINDOW - (now - recent[0])
        self._attempts[client] = [*recent, now]
        while len(self._attempts) > MAX_CLIENTS:
            self._attempts.popitem(last=False)
        return 0.0


def same_origin(origin: str | None, host: str | None) -> bool:
    """Whether a form post's Origin is the page's own host. No Origin (a script, an old
    browser) passes: every current browser sends one on a cross-origin post. The scheme is not
    compared: behind a TLS proxy the controller sees http where the browser says https."""
    if origin is None:
        return True
    return bool(host) and urlsplit(origin).netloc.lower() == (host or "").lower()
