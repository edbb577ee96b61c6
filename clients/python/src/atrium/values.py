"""ValueSets (CONTRACT section 3) in Python's types, kinds kept both ways:

==================  =====================================================
Python              ValueSet kind
==================  =====================================================
``str``             string
``int``             int (Int64; ``bool`` is not an int here)
``float``           double
``bool``            bool
``bytes``           bytes (``bytearray`` and ``memoryview`` are sent as bytes)
``datetime``        date (aware; read back in UTC)
``uuid.UUID``       uuid
``list``            array of one kind (or of maps); ``tuple`` is sent as a list
``dict``            map, text keys
==================  =====================================================

Anything else (``None``, a mixed list, a list of lists, an int past Int64, a naive
datetime, a key that is not text, nesting deeper than 32 levels) is refused before it is
sent, with an :class:`~atrium.errors.InvalidValueError` naming the key.
"""
from __future__ import annotations

import datetime
import uuid
from typing import Any, Dict, Mapping

from . import _cbor
from ._cbor import _key_path
from .errors import InvalidValueError

#: What a message is: text keys, values of the kinds above.
ValueSet = Dict[str, Any]

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
MAX_DEPTH = 32


def kind_of(value: Any) -> str:
    """The ValueSet kind of a Python value, or ``"?"`` when it has none."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(value, datetime.datetime):
        return "date"
    if isinstance(value, uuid.UUID):
        return "uuid"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "map"
    return "?"


def check(message: Any, path: str = "message") -> ValueSet:
    """`message` as it will be sent: a ``dict`` whose every value has a ValueSet kind.

    Raises :class:`~atrium.errors.InvalidValueError` naming the first value that has none.
    """
    if not isinstance(message, Mapping):
        raise InvalidValueError(path, f"a message is a dict, not {type(message).__name__}")
    return _check_map(message, path, 1)


def _check_map(value: Mapping[Any, Any], path: str, depth: int) -> ValueSet:
    if depth > MAX_DEPTH:
        raise InvalidValueError(path, f"maps and arrays nest deeper than {MAX_DEPTH} levels")
    checked: ValueSet = {}
    for key, element in value.items():
        if not isinstance(key, str):
            raise InvalidValueError(path, f"key {key!r} is a {type(key).__name__}, not text")
        checked[key] = _check_value(element, _key_path(path, key), depth)
    return checked


def _check_value(value: Any, path: str, depth: int) -> Any:
    kind = kind_of(value)
    if kind == "int":
        if not INT64_MIN <= value <= INT64_MAX:
            raise InvalidValueError(path, f"integer {value} is outside the Int64 range")
        return int(value)
    if kind in ("bool", "double", "string", "uuid"):
        return value
    if kind == "bytes":
        return bytes(value)
    if kind == "date":
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidValueError(
                path, "a datetime without a time zone is not a date: give it tzinfo=datetime.timezone.utc")
        return value
    if kind == "map":
        return _check_map(value, path, depth + 1)
    if kind == "array":
        if depth + 1 > MAX_DEPTH:
            raise InvalidValueError(path, f"maps and arrays nest deeper than {MAX_DEPTH} levels")
        _check_kinds(value, path)
        return [_check_value(element, f"{path}[{index}]", depth + 1) for index, element in enumerate(value)]
    if value is None:
        raise InvalidValueError(path, "None is not a ValueSet kind")
    raise InvalidValueError(path, f"{type(value).__name__} is not a ValueSet kind")


def decode(data: bytes, path: str = "message") -> ValueSet:
    """A ValueSet from its CBOR (any well-formed encoding of its kinds); anything else raises
    :class:`~atrium.errors.InvalidValueError` naming the path."""
    try:
        item = _cbor.loads(data, root=path, max_depth=MAX_DEPTH)
    except ValueError as error:
        where, _, reason = str(error).partition(": ")
        raise InvalidValueError(where or path, reason or str(error)) from None
    return from_wire(item, path)


def encode(message: Mapping[str, Any]) -> bytes:
    """The CBOR of a message, as the host writes it, after :func:`check`."""
    return _cbor.dumps(check(message))


def from_wire(message: Any, path: str = "message") -> ValueSet:
    """A message as the host sent it (decoded CBOR), checked: text keys, ValueSet kinds."""
    if not isinstance(message, dict):
        raise InvalidValueError(path, f"a message is a map, not {type(message).__name__}")
    return _from_wire_map(message, path, 1)


def _from_wire_map(value: Dict[Any, Any], path: str, depth: int) -> ValueSet:
    if depth > MAX_DEPTH:
        raise InvalidValueError(path, f"maps and arrays nest deeper than {MAX_DEPTH} levels")
    read: ValueSet = {}
    for key, element in value.items():
        if not isinstance(key, str):
            raise InvalidValueError(path, f"key {key!r} is not text")
        read[key] = _from_wire_value(element, _key_path(path, key), depth)
    return read


def _check_kinds(elements: Any, path: str) -> None:
    """An array holds scalars of one kind, or maps; the first element that breaks it is
    named."""
    first = None
    for index, element in enumerate(elements):
        kind = kind_of(element)
        if kind == "array":
            raise InvalidValueError(f"{path}[{index}]", "an array may not hold arrays")
        if first is not None and kind != first:
            raise InvalidValueError(f"{path}[{index}]", f"array mixes {first} and {kind}")
        first = first or kind


def _from_wire_value(value: Any, path: str, depth: int) -> Any:
    if isinstance(value, dict):
        return _from_wire_map(value, path, depth + 1)
    if isinstance(value, list):
        if depth + 1 > MAX_DEPTH:
            raise InvalidValueError(path, f"maps and arrays nest deeper than {MAX_DEPTH} levels")
        if any(isinstance(element, list) for element in value):
            _check_kinds(value, path)
        elements = [_from_wire_value(element, f"{path}[{index}]", depth + 1) for index, element in enumerate(value)]
        _check_kinds(elements, path)
        return elements
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise InvalidValueError(path, "a date without a time zone")
        return value.astimezone(datetime.timezone.utc)
    kind = kind_of(value)
    if kind == "int" and not INT64_MIN <= value <= INT64_MAX:
        raise InvalidValueError(path, f"integer {value} is outside the Int64 range")
    if kind in ("bool", "int", "double", "string", "bytes", "uuid"):
        return value
    if isinstance(value, _cbor.Unsupported):
        raise InvalidValueError(path, value.reason)
    if value is None:
        raise InvalidValueError(path, "null is not a ValueSet kind")
    raise InvalidValueError(path, f"{type(value).__name__} is not a ValueSet kind")
