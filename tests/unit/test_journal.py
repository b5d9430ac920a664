"""Records reach the journal's native socket with their reason code as a field."""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from xce_agent.system.journal import CodeFormatter, JournalHandler, field, priority
from xce_protocol.reasons import Reason


def parse(datagram: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    rest = datagram
    while rest:
        line, _, tail = rest.partition(b"\n")
        if b"=" in line:
            key, _, value = line.partition(b"=")
            out[key.decode()] = value.decode()
            rest = tail
        else:  # binary-safe form: NAME\n<le64 length><data>\n
            (size,) = struct.unpack("<Q", tail[:8])
            out[line.decode()] = tail[8 : 8 + size].decode()
            rest = tail[8 + size + 1 :]
    return out


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "journal.sock"))
    sock.settimeout(5)
    yield sock
    sock.close()


def test_reason_code_and_component_are_fields(journal: socket.socket, tmp_path: Path) -> None:
    handler = JournalHandler(str(tmp_path / "journal.sock"))
    log = logging.getLogger("xce_agent.test_journal")
    log.addHandler(handler)
    try:
        log.warning(
            "worker: gave up\nafter 5 starts",
            extra={"reason_code": Reason.WORKER_FATAL, "component": "worker"},
        )
    finally:
        log.removeHandler(handler)
        handler.close()
    got = parse(journal.recv(65536))
    assert got["MESSAGE"] == "worker: gave up\nafter 5 starts"
    assert got["REASON_CODE"] == "worker_fatal" and got["COMPONENT"] == "worker"
    assert got["PRIORITY"] == "4" and got["SYSLOG_IDENTIFIER"] == "xce-agent"
    assert got["LOGGER"] == "xce_agent.test_journal" and got["CODE_FUNC"].startswith("test_")


def test_no_journal_falls_back_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    handler = JournalHandler(str(tmp_path / "absent.sock"))
    handler.setFormatter(CodeFormatter("%(levelname)s %(message)s"))
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "lost", None, None)
    record.reason_code = Reason.CONTROLLER_UNREACHABLE
    handler.emit(record)
    handler.close()
    assert capsys.readouterr().err == "ERROR lost [controller_unreachable]\n"


def test_priorities_and_huge_values() -> None:
    assert [priority(x) for x in (50, 40, 30, 20, 10, 5)] == [2, 3, 4, 6, 7, 7]
    assert len(field("MESSAGE", "x" * 100_000)) < 50_000
