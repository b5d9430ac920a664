"""Which record an admin means: by host name, instance id or expected address.

An expected instance recorded without a name has none until it joins, so it must be reached
by its instance id or its expected address (a leaked per-instance join token is revoked by
decommissioning the record it belongs to). A reference that fits more than one live record is
refused with the candidates listed, never guessed; each is then reached by a prefixed
reference (`host:NAME`, `instance:ID`, `address:ADDR`), which means one kind only (no host
name, instance id or address holds a colon).
"""

from __future__ import annotations

from xce_controller.core.lifecycle import Refused
from xce_controller.core.model import TERMINAL, Cluster, Host
from xce_protocol import names

SHOWN = 10  # candidates listed in an ambiguous answer


PREFIXES = ("host:", "instance:", "address:")


def candidates(cluster: Cluster, ref: str) -> list[Host]:
    """Every live record `ref` may mean, by host name, instance id or expected address alike
    (a host may join under a name that is another record's instance id or address: taking
    the name first decommissioned the wrong one); with none live, the one that left last, by
    name first, else by instance id, else by expected address. A prefixed reference looks
    in its own kind only."""
    groups = _groups(cluster, ref)
    live = {h.key: h for found in groups for h in found if h.state not in TERMINAL}
    if live:
        return list(live.values())
    for found in groups:
        if found:
            return _latest(found)
    return []


def _groups(cluster: Cluster, ref: str) -> tuple[list[Host], ...]:
    kind, sep, rest = ref.partition(":")
    if sep:
        if kind == "host":
            return (_by_name(cluster, rest),)
        if kind == "instance":
            return (_by_instance(cluster, rest),)
        if kind == "address":
            return (_by_address(cluster, rest),)
    return (_by_name(cluster, ref), _by_instance(cluster, ref), _by_address(cluster, ref))


def _by_name(cluster: Cluster, ref: str) -> list[Host]:
    host = cluster.host_by_name(ref) if names.is_host_name(ref) else None
    return [host] if host is not None else []


def _by_instance(cluster: Cluster, ref: str) -> list[Host]:
    host = cluster.by_instance(ref) if names.is_instance_id(ref) else None
    return [host] if host is not None else []


def _by_address(cluster: Cluster, ref: str) -> list[Host]:
    if not ref or len(ref) > 64:
        return []
    return [h for h in cluster.hosts.values() if h.expected_address == ref]


def _latest(hosts: list[Host]) -> list[Host]:
    """Of records that all left the cluster, the one that left last (a reused address)."""
    if len(hosts) <= 1:
        return hosts
    return [max(hosts, key=lambda h: h.history[-1].at if h.history else 0.0)]


def resolve(cluster: Cluster, ref: str) -> Host:
    """The one record `ref` means; Refused 404 for none, 409 (with the candidates) for more."""
    found = candidates(cluster, ref)
    if not found:
        raise Refused("not_found", 404, f"no host {ref[:80]}")
    if len(found) > 1:
        shown = ", ".join(describe(h) for h in found[:SHOWN])
        more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
        raise Refused(
            "ambiguous",
            409,
            f"{ref[:80]} may mean {len(found)} hosts: {shown}{more}; name one as "
            f"{' or '.join(sorted({unique_ref(h, ref) for h in found[:SHOWN]}))}",
            candidates=[
                {
                    "host": h.name or h.expected_name,
                    "instance_id": h.instance_id,
                    "key": h.key,
                    "ref": unique_ref(h, ref),
                }
                for h in found[:SHOWN]
            ],
        )
    return found[0]


def unique_ref(host: Host, ref: str) -> str:
    """A prefixed reference that reaches `host` by the kind `ref` matched it by."""
    if host.name and names.is_host_name(ref) and host.name.lower() == ref.lower():
        return f"host:{host.name}"
    if host.instance_id == ref:
        return f"instance:{host.instance_id}"
    if host.expected_address == ref:
        return f"address:{ref}"
    return f"instance:{host.instance_id}" if host.instance_id else f"host:{host.name}"


def describe(host: Host) -> str:
    name = host.name or host.expected_name or "-"
    return f"{name} (instance {host.instance_id or '-'}, {host.state.value})"
