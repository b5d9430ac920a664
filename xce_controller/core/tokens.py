"""Which bearer is which role: every token the controller holds, compared with every other.

A token is the role it grants, so one secret for two roles is the weaker role holding the
stronger one's power (a read-only token that is the admin token makes admin calls). The
configured tokens, the ones the controller generated (kept beside the database) and the
per-instance join tokens are all compared, at start and at every reload; a clash is a config
error naming both. Pure functions: the controller calls them with what it holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from xce_controller.core import credentials
from xce_controller.core.config import ClusterConfig
from xce_controller.core.model import Host
from xce_protocol import names

# A per-instance join token is guessed offline from a copied database (its HMAC is there)
# or online at /v1/join: it must not be short, nor one character repeated.
INSTANCE_TOKEN_MIN = 16
INSTANCE_TOKEN_DISTINCT = 6
STRENGTH = (
    f"at least {INSTANCE_TOKEN_MIN} printable ASCII characters without spaces, "
    f"at least {INSTANCE_TOKEN_DISTINCT} of them different"
)


def of(cfg: ClusterConfig) -> dict[str, str]:
    """Each role's token, configured or generated."""
    return {
        "admin": cfg.admin_token,
        "read": cfg.read_token,
        "provisioner": cfg.provisioner_token,
        "join": cfg.join_token,
    }


def with_token(cfg: ClusterConfig, role: str, token: str, generated: bool = False) -> ClusterConfig:
    """The config with `role`'s token set (one the controller made, if `generated`)."""
    changes: dict[str, Any] = {f"{role}_token": token}
    if generated:
        changes["generated_tokens"] = (*cfg.generated_tokens, role)
    return replace(cfg, **changes)


def problems(cfg: ClusterConfig, hosts: Iterable[Host]) -> list[str]:
    """Every clash among the tokens the controller would run with (start, reload)."""
    roles = of(cfg)
    return [
        *clashes(roles, cfg.generated_tokens),
        *instance_clashes(roles, hosts, cfg.generated_tokens),
    ]


def label(role: str, generated: Iterable[str] = ()) -> str:
    """How a problem names a role's token: its config key, or where a generated one is."""
    if role in generated:
        return f"the generated {role} token (kept beside the database)"
    return f"auth.{role}_token"


def clashes(tokens: Mapping[str, str], generated: Iterable[str] = ()) -> list[str]:
    """A problem for every two roles given the same token; "" tokens are no token."""
    made = tuple(generated)
    problems = []
    roles = [(role, token) for role, token in tokens.items() if token]
    for n, (role, token) in enumerate(roles):
        for other, seen in roles[:n]:
            if credentials.same(token, seen):
                problems.append(
                    f"{label(role, made)}: expected a token different from "
                    f"{label(other, made)} (one token for two roles is one role), "
                    "got the same token"
                )
    return problems


def instance_clashes(
    tokens: Mapping[str, str], hosts: Iterable[Host], generated: Iterable[str] = ()
) -> list[str]:
    """A problem for every live record whose per-instance join token is a role's token."""
    made = tuple(generated)
    problems = []
    for host in hosts:
        if not host.token_hash or host.incarnation > 0:  # used once: it joins no more
            continue
        for role, token in tokens.items():
            if credentials.matches(token, host.token_hash):
                problems.append(
                    f"{label(role, made)}: expected a token different from the join token "
                    f"of instance {host.instance_id}, got the same token"
                )
    return problems


def weak(token: str) -> bool:
    """Whether `token` is too weak to be a per-instance join token (STRENGTH)."""
    return (
        not names.is_bearer_token(token)
        or len(token) < INSTANCE_TOKEN_MIN
        or len(set(token)) < INSTANCE_TOKEN_DISTINCT
    )


def role_of(token: str, tokens: Mapping[str, str]) -> str:
    """The role whose token `token` is ("" for none)."""
    return next((role for role, known in tokens.items() if credentials.same(token, known)), "")
