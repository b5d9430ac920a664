"""The few pydantic calls that differ between pydantic 1.10 (Debian 12's) and pydantic 2.

The request and answer bodies (schemas.py) are written once against these: the controller
runs on Debian 12 from its archive (FastAPI 0.92, pydantic 1.10) and on current releases.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pydantic
from pydantic import BaseModel, Field

from xce_protocol.times import parse_time

PYDANTIC_2 = int(pydantic.VERSION.split(".", 1)[0]) >= 2


def text(default: Any = ..., *, pattern: str | None = None, **limits: Any) -> Any:
    """A string field; `pattern` is pydantic 1's `regex`."""
    if pattern is not None:
        limits["pattern" if PYDANTIC_2 else "regex"] = pattern
    return Field(default, **limits)


def items(default: Any = ..., *, min_length: int | None = None, max_length: int) -> Any:
    """A list field bounded in length (pydantic 1 calls the bounds min_items/max_items)."""
    names = ("min_length", "max_length") if PYDANTIC_2 else ("min_items", "max_items")
    limits: dict[str, Any] = {names[1]: max_length}
    if min_length is not None:
        limits[names[0]] = min_length
    if default is list:
        return Field(default_factory=list, **limits)
    return Field(default, **limits)


def mapping(*, max_length: int, key_pattern: str) -> Any:
    """A JSON object field (default empty) whose schema bounds its entries and names its keys'
    pattern. The schema only says it: pydantic 1 checks neither, so the model checks both
    with `checked` too."""
    names: dict[str, Any] = {"propertyNames": {"pattern": key_pattern}}
    if PYDANTIC_2:
        return Field(default_factory=dict, max_length=max_length, json_schema_extra=names)
    extra: dict[str, Any] = {"maxProperties": max_length, **names}
    return Field(default_factory=dict, **extra)  # pydantic 1: extra keywords go to the schema


def checked(func: Callable[[Any], Any], *fields: str) -> Any:
    """A class-body validator running `func` on `fields` once their types are checked."""

    def check(cls: type[BaseModel], value: Any) -> Any:
        return func(value)

    if PYDANTIC_2:
        return pydantic.field_validator(*fields)(check)
    return pydantic.validator(*fields, allow_reuse=True)(check)


def _json_number(value: Any, integer: bool) -> Any:
    """JSON Schema's number and integer: no booleans, no numeric strings (pydantic's lax mode
    would coerce both), but 3.0 is an integer and 3.5 is not (pydantic 1 would truncate)."""
    if isinstance(value, (bool, str)):
        raise ValueError("expected a number")
    if integer and isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ValueError("expected an integer")
    return value


def json_numbers(*fields: str, integer: bool) -> Any:
    """A class-body validator making `fields` JSON numbers (integers when `integer`)."""

    def check(cls: type[BaseModel], value: Any) -> Any:
        return _json_number(value, integer)

    if PYDANTIC_2:
        return pydantic.field_validator(*fields, mode="before")(check)
    return pydantic.validator(*fields, pre=True, allow_reuse=True)(check)


def json_times(*fields: str) -> Any:
    """A class-body validator reading `fields` as times: RFC 3339 or seconds since the epoch
    (xce_protocol.times); null stays null."""

    def check(cls: type[BaseModel], value: Any) -> Any:
        if value is None:
            return None
        seconds = parse_time(value)
        if seconds is None or seconds <= 0:
            raise ValueError(
                "expected a time: RFC 3339 like 2026-12-01T08:22:00Z, or seconds since the epoch"
            )
        return seconds

    if PYDANTIC_2:
        return pydantic.field_validator(*fields, mode="before")(check)
    return pydantic.validator(*fields, pre=True, allow_reuse=True)(check)


def dump(model: BaseModel, exclude: set[str] | None = None) -> dict[str, Any]:
    if PYDANTIC_2:
        return model.model_dump(exclude=exclude)
    return model.dict(exclude=exclude)


if TYPE_CHECKING or PYDANTIC_2:

    class Lenient(BaseModel):
        """Agents may send fields a newer protocol adds: unknown fields are ignored."""

        model_config = pydantic.ConfigDict(extra="ignore")

    class Strict(BaseModel):
        """Admin bodies: an unknown field is a mistake, refused."""

        model_config = pydantic.ConfigDict(extra="forbid")

else:

    def _strings(cls: type[BaseModel], value: Any, field: Any) -> Any:
        """pydantic 1 turns 5 into "5" for a str field (pydantic 2 refuses): refuse too. And
        its patterns match from the start only, where `$` also matches before a final newline
        ("h1\n" would pass `^[a-z0-9]+$`): the whole string must match, as in pydantic 2."""
        if isinstance(field.type_, type) and issubclass(field.type_, str) and value is not None:
            found = value if isinstance(value, list) else [value]
            if not all(isinstance(v, str) for v in found):
                raise TypeError("expected a string")
            pattern = getattr(field.type_, "regex", None)
            if pattern is not None and any(pattern.fullmatch(v) is None for v in found):
                raise ValueError(f"string does not match {pattern.pattern!r}")
        return value

    class Lenient(BaseModel):
        check_strings = pydantic.validator("*", pre=True, allow_reuse=True)(_strings)

        class Config:
            extra = "ignore"

    class Strict(BaseModel):
        check_strings = pydantic.validator("*", pre=True, allow_reuse=True)(_strings)

        class Config:
            extra = "forbid"
