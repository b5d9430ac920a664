"""Allow `python -m xce_controller`."""

from xce_controller.cli.controller import main

main()
