"""`python3 -m xce_provisioner`: the same as the `xce-provisioner` command."""

from __future__ import annotations

from xce_provisioner.cli import main

main()
