"""A component's own status lines: what `xce-agent status` shows under the component.

A component started as the agent's own user is given `XCE_STATUS_FILE`, a path in the agent's
state directory (`component-NAME.status`); it may write there, whole and renamed into place,
a few lines that say where it stands (the provisioner: its lease and its last power actions).
The file is the component's word, read as untrusted text: at most `LIMIT` bytes are read, at
most `MAX_LINES` lines shown, each cut to `LINE_MAX` characters and made printable.
"""

from __future__ import annotations

from xce_protocol.protocol import printable

ENV = "XCE_STATUS_FILE"
LIMIT = 4096  # bytes read of the file
MAX_LINES = 8
LINE_MAX = 160


def file_name(component: str) -> str:
    """The status file's name in the state directory (a component name has no `/`)."""
    return f"component-{component}.status"


def parse(data: bytes) -> tuple[str, ...]:
    """The lines to show of what the component wrote (blank lines dropped)."""
    text = data[:LIMIT].decode("utf-8", errors="replace")
    lines = [printable(line.strip())[:LINE_MAX] for line in text.splitlines()]
    return tuple(line for line in lines if line)[:MAX_LINES]
