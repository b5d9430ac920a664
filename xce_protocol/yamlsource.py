"""Load YAML so that every mapping and list remembers the line of each key and item.

Validation messages must name the line a problem is on, and PyYAML's plain loader
forgets positions. Duplicate keys, which PyYAML silently collapses, are reported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_CONFIG_BYTES = 1024 * 1024


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
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1} column {mark.column + 1})" if mark else ""
        raise SourceError(f"{origin}: not valid YAML: {exc.problem}{where}") from None
    except yaml.YAMLError as exc:
        raise SourceError(f"{origin}: not valid YAML: {exc}") from None
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


def load_file(path: Path) -> LineDict:
    """Read and parse a YAML file; every failure becomes a one-line SourceError."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise SourceError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise SourceError(f"{path}: expected a file, got a directory") from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise SourceError(f"{path}: expected at most {MAX_CONFIG_BYTES} bytes, got more")
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
