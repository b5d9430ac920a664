"""Drivers: how the provisioner reaches a machine's power (base.py says the interfaces)."""
