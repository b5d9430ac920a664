"""The reference provisioner: powers on-premise machines on and off to follow the controller.

It runs as the singleton component of an agent's `provisioner` role (under its lease, so two
never act at once), reads the controller's provisioned records and carries out what they say
on the machines of its inventory, through a driver (Redfish here). It imports the protocol
package and its own drivers only: never the agent or the controller. See docs/provisioner.md.
"""

__version__ = "0.2.0"
