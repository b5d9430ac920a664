"""Allow `python -m xce_agent.controller`."""

from xce_agent.controller.cli import main

main()
