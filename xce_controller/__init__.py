"""The reference controller: the controller side of the elastic-hosts brief.

It is the executable specification of the agent protocol and the agent's peer in tests and
in `xce-agent demo`. The agent never imports this package.
"""

__version__ = "0.2.0"
