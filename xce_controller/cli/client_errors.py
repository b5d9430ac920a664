"""What `xcecli` says when the controller refuses or cannot be reached (each with its exit code)."""

from __future__ import annotations

from xce_protocol.errors import XceError


class ControllerRefused(XceError):
    """The controller answered with an error status."""

    exit_code = 1


class ControllerUnreachable(XceError):
    """No answer from the controller at all."""

    exit_code = 3
