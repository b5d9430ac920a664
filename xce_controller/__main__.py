"""Allow `python -m xce_controller`."""

from xce_controller.cli import main

main()
