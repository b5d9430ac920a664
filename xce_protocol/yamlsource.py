"""Load YAML so that every mapping and list remembers the line of each key and item.

Validation messages must name the line a problem is on, and PyYAML's plain loader
forgets positions. Duplicate keys, which PyYAML silently collapses, are reported.

Hostile files are refused before any object is built: only regular files are read (a FIFO
would block), at most MAX_CONFIG_BYTES; nesting deeper than MAX_DEPTH, an alias or a
collection used as a mapping key, an alias inside its own anchor, documents of more than
MAX_NODES nodes and documents whose aliases expand to more than MAX_NODES nodes are errors
of one line.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

MAX_CONFIG_BYTES = 1024 * 1024
MAX_DEPTH = 64
# Composing is pure Python: 20,000 nodes take about 0.3 s, so a file at the byte limit full of
# tiny items is refused in well under a second instead of taking seconds to build.
MAX_NODES = 20_000


class _Refused(yaml.MarkedYAMLError):
    """A document the loader refuses to build (too deep, too large once expanded)."""


class LineDict(dict):  # type: ignore[type-arg]
    """A mapping that knows the line (1-based) of each of its keys."""

    line: int = 0
    key_lines: dict[Any, int]


class LineList(list):  # type: ignore[type-arg]
    """A list that knows the line of each of its items."""

    line: int = 0
    item_lines: list[int]


class _Loader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[str, int]] = []
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        # Mapping keys are composed with index None: an alias there is the classic bomb.
        if isinstance(parent, yaml.MappingNode) and index is None:
            event = self.peek_event()  # type: ignore[no-untyped-call]
            if not isinstance(event, yaml.ScalarEvent):
                raise _Refused(None, None, "expected a plain mapping key", event.start_mark)
        self._nodes += 1
        if self._nodes > MAX_NODES:
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise _Refused(None, None, f"has more than {MAX_NODES} nodes", mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise _Refused(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_map(self, node: yaml.MappingNode) -> Any:
        data = LineDict()
        data.line = node.start_mark.line + 1
        data.key_lines = {}
        yield data
        self.flatten_mapping(node)
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                key = str(key)
            line = key_node.start_mark.line + 1
            if key in data:
                self.duplicates.append((str(key), line))
            data[key] = self.construct_object(value_node, deep=True)
            data.key_lines[key] = line

    def construct_yaml_seq(self, node: yaml.SequenceNode) -> Any:
        data = LineList()
        data.line = node.start_mark.line + 1
        data.item_lines = [item.start_mark.line + 1 for item in node.value]
        yield data
        data.extend(self.construct_sequence(node, deep=True))


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_yaml_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _Loader.construct_yaml_seq)


class SourceError(Exception):
    """The file could not be read as a YAML mapping; the message is one line."""


def load_text(text: str, origin: str) -> LineDict:
    """Parse `text` and return its top-level mapping, or raise SourceError."""
    if "\x00" in text:
        raise SourceError(f"{origin}: expected a YAML text file, got binary data")
    if not text.strip():
        raise SourceError(f"{origin}: expected a YAML mapping, got an empty file")
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_expansion(node)
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1} column {mark.column + 1})" if mark else ""
        raise SourceError(f"{origin}: not valid YAML: {exc.problem}{where}") from None
    except yaml.YAMLError as exc:
        raise SourceError(f"{origin}: not valid YAML: {exc}") from None
    except RecursionError:
        raise SourceError(f"{origin}: not valid YAML: nested too deeply") from None
    except ValueError as exc:
        # A scalar its tag cannot hold: an int of more than 4,300 digits (Python's bound on
        # int(str)), a date like 2001-13-45, `!!int abc`. PyYAML raises it unmarked; it ended
        # `validate` with a traceback and a reload by SIGHUP with the agent.
        why = str(exc).split(";")[0]
        raise SourceError(
            f"{origin}: not valid YAML: a value that cannot be read ({why})"
        ) from None
    finally:
        loader.dispose()
    if loader.duplicates:
        key, line = loader.duplicates[0]
        raise SourceError(f"{origin}: duplicate key {key!r} (line {line})")
    if data is None:
        raise SourceError(f"{origin}: expected a YAML mapping, got an empty document")
    if not isinstance(data, LineDict):
        raise SourceError(f"{origin}: expected a YAML mapping at the top, got {_kind(data)}")
    return data


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a document whose aliases recurse or would expand to more than MAX_NODES nodes."""
    sizes: dict[int, int] = {}
    # Nodes whose children are being sized: meeting one again below itself is a recursive
    # alias (`a: &r [x, *r]`), which no walk or construction of the data could ever finish.
    open_nodes: set[int] = set()
    # Iterative post-order walk: each distinct node is sized once, aliases reuse the size.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if done or not children:
            open_nodes.discard(id(node))
            size = 1 + sum(sizes.get(id(child), 1) for child in children)
            if size > MAX_NODES:
                problem = f"expands to more than {MAX_NODES} nodes"
                raise _Refused(None, None, problem, node.start_mark)
            sizes[id(node)] = size
            continue
        if any(id(child) in open_nodes or child is node for child in children):
            raise _Refused(None, None, "an alias refers to its own anchor", node.start_mark)
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def read_regular_file(path: Path, limit: int) -> bytes:
    """At most `limit` bytes of a regular file; SourceError (one line) for anything else.

    Opened non-blocking so a FIFO or a device never hangs the caller, then checked with
    fstat, so what is read is what was checked.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise SourceError(f"{path}: file not found") from None
    except (OSError, ValueError) as exc:
        raise SourceError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise SourceError(f"{path}: expected a file, got a directory")
        if not stat.S_ISREG(mode):
            raise SourceError(f"{path}: expected a regular file, got {_file_kind(mode)}")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(limit + 1)
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise SourceError(f"{path}: expected at most {limit} bytes, got more")
    return raw


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def load_file(path: Path) -> LineDict:
    """Read and parse a YAML file; every failure becomes a one-line SourceError."""
    raw = read_regular_file(path, MAX_CONFIG_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SourceError(f"{path}: expected a UTF-8 YAML text file, got binary data") from None
    return load_text(text, str(path))


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"{type(value).__name__} {value!r}"
