"""The driver interfaces: one small seam between the provisioner's decisions and machines.

A power driver (on-premise machines: Redfish, and later IPMI or a PDU) answers a machine's
power state and carries out one power request; a cloud driver (EC2, GCE, OpenStack: none is
written yet) creates and terminates instances. Every failure is a `DriverError` with a reason
code (xce_protocol.reasons, the `bmc_*` codes), so the provisioner's journal, its metrics and
`xcecli why` say what went wrong without knowing the driver.

A request is made once per call: drivers do not retry a request that may have been carried
out (a POST whose answer was lost), because the provisioner's effect journal decides whether
to ask again. They may retry reads, and a request the far side refused before acting.
"""

from __future__ import annotations

import enum
from typing import Protocol

from xce_protocol.reasons import Reason


class Power(str, enum.Enum):
    ON = "on"
    OFF = "off"
    UNKNOWN = "unknown"  # the driver could not tell (an error, or a state in between)


class Request(str, enum.Enum):
    """What the provisioner asks of a machine's power."""

    ON = "on"
    SHUTDOWN = "shutdown"  # graceful: the operating system is asked to shut down
    FORCE_OFF = "force_off"
    CYCLE = "cycle"  # off then on (a forced restart); power on if it is off


class DriverError(Exception):
    """A request or a read that failed; `code` is one of the `bmc_*` reason codes."""

    def __init__(self, code: Reason, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class PowerDriver(Protocol):
    """One management endpoint (a BMC, or a Redfish aggregator) and the systems behind it."""

    def power(self, system: str) -> Power:
        """The system's power state now; DriverError when it cannot be read."""
        ...

    def request(self, system: str, what: Request) -> None:
        """Ask once for `what`; returns when the endpoint accepted it (the change itself
        may take a while: the provisioner watches `power` for it). DriverError otherwise."""
        ...

    def close(self) -> None: ...


class CloudDriver(Protocol):
    """A cloud's instances (a driver is one module implementing this; none is included).

    `token` is the provisioner's decision key (the controller record's state and time), sent
    as the cloud's idempotency token (EC2 ClientToken, GCE requestId, an OpenStack server
    name or metadata tag), so a create or terminate repeated after a crash or a lease
    takeover is the same request to the cloud, never a second instance.
    """

    def create(self, template: str, name: str, token: str) -> str:
        """Start an instance of `template` named `name`; its instance id."""
        ...

    def terminate(self, instance_id: str, token: str) -> None:
        """Give the instance back; done (no error) when it is gone already."""
        ...

    def power(self, instance_id: str) -> Power:
        """ON while it exists and runs, OFF when it is stopped or gone."""
        ...
