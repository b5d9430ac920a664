"""What the node agent and the controller share: the wire protocol, config checking, errors.

`xce_agent` and `xce_controller` both import this package and never each other.
"""

__version__ = "0.2.0"
