"""Allow `python -m xce_agent`."""

from xce_agent.cli import main

main()
