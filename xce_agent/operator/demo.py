"""`xce-agent demo` on a node: hand over to the controller's demo, or say how to install it.

The demo needs the reference controller, which a node does not carry; the agent never imports
it, so the demo runs as its own process when the controller is installed beside the agent.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


def install_hint(package_file: str = __file__) -> str:
    """How to get the controller, in the words of the way this agent was installed."""
    where = Path(package_file).resolve()
    if "dist-packages" in where.parts and str(where).startswith("/usr/lib/"):
        return "apt install xce-controller"
    if str(where).startswith(("/usr/lib/python3", "/usr/lib64/python3")):
        return "dnf install xce-controller"
    return "pip install xce-controller (or make demo in a source checkout)"


def launch_demo(out: Callable[[str], None]) -> int:
    if importlib.util.find_spec("xce_controller") is None:
        out(f"xce-agent demo needs the reference controller: {install_hint()}")
        return 2
    return subprocess.call([sys.executable, "-m", "xce_controller", "demo"])
