"""Log records to the systemd journal with structured fields, through its native socket.

Under systemd (JOURNAL_STREAM set, the journal's socket present) each record is one datagram
of `FIELD=value` pairs: MESSAGE, PRIORITY, SYSLOG_IDENTIFIER, LOGGER, CODE_*, and any of
REASON_CODE, COMPONENT, ROLE, INSTANCE_ID passed in `extra` (`log.warning(..., extra={
"reason_code": Reason.WORKER_FATAL})`), so `journalctl REASON_CODE=worker_fatal` finds them.
The stdlib only: no python3-systemd dependency. If a datagram cannot be sent (the journal
restarted, a huge record) the record goes to stderr instead; logging never fails the agent.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import sys

JOURNAL_SOCKET = "/run/systemd/journal/socket"
IDENTIFIER = "xce-agent"
EXTRA_FIELDS = ("reason_code", "component", "role", "instance_id")
MAX_VALUE = 48 * 1024  # a datagram must stay below the socket's buffer

_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


def priority(levelno: int) -> int:
    for level in sorted(_PRIORITY, reverse=True):
        if levelno >= level:
            return _PRIORITY[level]
    return 7


def field(name: str, value: object) -> bytes:
    """One field in the native protocol: `NAME=value\\n`, or a length-prefixed value when
    it holds a newline."""
    data = str(value.value if hasattr(value, "value") else value).encode("utf-8", "replace")
    data = data[:MAX_VALUE]
    key = name.upper().encode()
    if b"\n" not in data:
        return key + b"=" + data + b"\n"
    return key + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"


def fields(record: logging.LogRecord, message: str) -> bytes:
    parts = [
        field("MESSAGE", message),
        field("PRIORITY", priority(record.levelno)),
        field("SYSLOG_IDENTIFIER", IDENTIFIER),
        field("LOGGER", record.name),
        field("CODE_FILE", record.pathname),
        field("CODE_LINE", record.lineno),
        field("CODE_FUNC", record.funcName),
    ]
    for name in EXTRA_FIELDS:
        value = getattr(record, name, None)
        if value:
            parts.append(field(name, value))
    return b"".join(parts)


class JournalHandler(logging.Handler):
    def __init__(self, path: str = JOURNAL_SOCKET) -> None:
        super().__init__()
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.fallback = logging.StreamHandler(sys.stderr)

    def setFormatter(self, fmt: logging.Formatter | None) -> None:
        super().setFormatter(fmt)
        self.fallback.setFormatter(fmt)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
            self.sock.sendto(fields(record, message), self.path)
        except OSError:
            self.fallback.emit(record)

    def close(self) -> None:
        self.sock.close()
        super().close()


def journal_available(path: str = JOURNAL_SOCKET) -> bool:
    return bool(os.environ.get("JOURNAL_STREAM")) and os.path.exists(path)


class CodeFormatter(logging.Formatter):
    """Plain lines for a terminal or a file, the reason code appended: `... [worker_fatal]`."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        code = getattr(record, "reason_code", None)
        if code:
            text += f" [{getattr(code, 'value', code)}]"
        return text
