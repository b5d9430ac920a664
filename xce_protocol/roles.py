"""The roles a host can have: the agent starts their components, templates name them."""

from __future__ import annotations

KNOWN_ROLES = ("worker", "provisioner", "reverse-proxy")
