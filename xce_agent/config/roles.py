"""The `roles` section: the host's roles and each one's components, their names unique on the
host, at most one singleton per lease, no more than a heartbeat may report."""

from __future__ import annotations

from xce_agent.config.component import parse_component
from xce_agent.supervision.spec import ComponentSpec
from xce_protocol.protocol import MAX_COMPONENTS
from xce_protocol.roles import KNOWN_ROLES
from xce_protocol.validation import Checker, describe
from xce_protocol.yamlsource import LineDict


def parse_roles(
    doc: LineDict, c: Checker, clustered: bool
) -> tuple[tuple[str, ...] | None, tuple[ComponentSpec, ...] | None]:
    node = c.mapping(doc, "roles", "")
    if node is None:
        return None, None
    if not node:
        c.report(
            "roles", f"at least one role of {', '.join(KNOWN_ROLES)}", "an empty mapping", node.line
        )
        return None, None
    roles: list[str] = []
    components: list[ComponentSpec] = []
    seen: set[str] = set()
    for role, body in node.items():
        line = node.key_lines.get(role, node.line)
        if role not in KNOWN_ROLES:
            c.report(
                f"roles.{role}",
                f"a known role ({', '.join(KNOWN_ROLES)})",
                f"unknown role {str(role)!r}",
                line,
            )
            continue
        roles.append(str(role))
        if not isinstance(body, LineDict):
            c.report(f"roles.{role}", "a mapping with components", describe(body), line)
            continue
        c.allowed_keys(body, f"roles.{role}", ("components",))
        comps = c.mapping(body, "components", f"roles.{role}")
        for name, spec in (comps or {}).items():
            line = comps.key_lines.get(name, 0) if comps else 0
            parsed = parse_component(str(role), name, spec, line, c, clustered)
            if parsed is not None:
                if parsed.name in seen:
                    c.report(
                        f"roles.{role}.components.{name}",
                        "a component name unique on the host",
                        "a name another role uses",
                        comps.key_lines.get(name, 0) if comps else 0,
                    )
                seen.add(parsed.name)
                _one_per_lease(parsed, components, f"roles.{role}.components.{name}", line, c)
                components.append(parsed)
    if len(components) > MAX_COMPONENTS:  # the controller refuses every heartbeat then
        expected = f"at most {MAX_COMPONENTS} components (what a heartbeat may report)"
        c.report("roles", expected, f"{len(components)}", node.line)
    return tuple(roles), tuple(components)


def _one_per_lease(
    spec: ComponentSpec, earlier: list[ComponentSpec], path: str, line: int, c: Checker
) -> None:
    """Two singletons of one host under one lease would share its hold (one agent run is
    one holder): both would run at once, and a release by one frees the lease while the
    other still runs."""
    if spec.singleton is None:
        return
    lease = spec.singleton.lease
    other = next((e for e in earlier if e.singleton and e.singleton.lease == lease), None)
    if other is not None:
        c.report(
            f"{path}.singleton",
            "a lease no other component of the host uses",
            f"lease {lease!r}, also {other.name}'s",
            line,
        )
