"""Secrets the controller hands out or is given: minted at random, stored only as salted HMACs.

A join token or a host credential is a high-entropy random string, so one HMAC-SHA256 under
a per-secret random salt is enough to make a copy of the database useless for calling the
API, and cheap enough to check on every heartbeat. The format names its scheme so a later
one can be added; the unsalted SHA-256 of older databases is still recognised.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

SCHEME = "hmac-sha256"


def mint() -> str:
    """A new secret: 256 bits, URL-safe."""
    return secrets.token_urlsafe(32)


def seal(secret: str, salt: str | None = None) -> str:
    """The stored form of `secret`: `hmac-sha256$SALT$DIGEST`; "" for no secret."""
    if not secret:
        return ""
    salt = salt if salt is not None else secrets.token_hex(16)
    digest = hmac.new(salt.encode(), secret.encode(), hashlib.sha256).hexdigest()
    return f"{SCHEME}${salt}${digest}"


def same(given: str, expected: str) -> bool:
    """Whether a presented token is a configured one, in constant time. Compared as bytes:
    compare_digest refuses str with non-ASCII characters, which any header may carry. An
    empty one is never a match (no token configured is not "any token")."""
    return bool(given) and bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


def matches(secret: str, sealed: str) -> bool:
    """Whether `secret` is the one `sealed` was made from (constant time in the digest)."""
    if not secret or not sealed:
        return False
    parts = sealed.split("$")
    if len(parts) == 3 and parts[0] == SCHEME:
        return hmac.compare_digest(seal(secret, parts[1]), sealed)
    if len(parts) == 1 and len(sealed) == 64:  # unsalted SHA-256 of databases before 1.1
        return hmac.compare_digest(hashlib.sha256(secret.encode()).hexdigest(), sealed)
    return False
