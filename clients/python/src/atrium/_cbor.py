"""CBOR as Atrium's host writes it (docs/PROTOCOL.md section 3): definite lengths, the
shortest head for every integer, length and tag, doubles in the shortest of float16,
float32 and float64 that holds them exactly (every NaN as ``f97e00``), dates as tag 1 over
an integer when whole, keys in the order given. Reading is cbor2's, which takes any
well-formed encoding."""
from __future__ import annotations

import datetime
import io
import math
import struct
import uuid
from typing import Any, List

import cbor2

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _head(major: int, number: int, out: List[bytes]) -> None:
    if number < 24:
        out.append(bytes([major << 5 | number]))
    elif number < 1 << 8:
        out.append(bytes([major << 5 | 24, number]))
    elif number < 1 << 16:
        out.append(bytes([major << 5 | 25]) + number.to_bytes(2, "big"))
    elif number < 1 << 32:
        out.append(bytes([major << 5 | 26]) + number.to_bytes(4, "big"))
    else:
        out.append(bytes([major << 5 | 27]) + number.to_bytes(8, "big"))


def _float(value: float, out: List[bytes]) -> None:
    if math.isnan(value):
        out.append(b"\xf9\x7e\x00")
        return
    for code, form in ((0xF9, ">e"), (0xFA, ">f")):
        try:
            packed = struct.pack(form, value)
        except (OverflowError, struct.error):
            continue
        if struct.unpack(form, packed)[0] == value:
            out.append(bytes([code]) + packed)
            return
    out.append(b"\xfb" + struct.pack(">d", value))


def seconds_since_epoch(moment: datetime.datetime) -> "int | float":
    """The seconds of an aware datetime since 1970-01-01 UTC: an int when whole."""
    delta = moment - EPOCH
    whole = delta.days * 86400 + delta.seconds
    if delta.microseconds == 0:
        return whole
    return whole + delta.microseconds / 1_000_000


def _encode(value: Any, out: List[bytes]) -> None:
    if value is True:
        out.append(b"\xf5")
    elif value is False:
        out.append(b"\xf4")
    elif isinstance(value, int):
        if value >= 0:
            _head(0, value, out)
        else:
            _head(1, -1 - value, out)
    elif isinstance(value, float):
        _float(value, out)
    elif isinstance(value, str):
        data = value.encode("utf-8")
        _head(3, len(data), out)
        out.append(data)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        _head(2, len(data), out)
        out.append(data)
    elif isinstance(value, datetime.datetime):
        _head(6, 1, out)
        _encode(seconds_since_epoch(value), out)
    elif isinstance(value, uuid.UUID):
        _head(6, 37, out)
        _head(2, 16, out)
        out.append(value.bytes)
    elif isinstance(value, (list, tuple)):
        _head(4, len(value), out)
        for element in value:
            _encode(element, out)
    elif isinstance(value, dict):
        _head(5, len(value), out)
        for key, element in value.items():
            _encode(key, out)
            _encode(element, out)
    else:
        raise TypeError(f"{type(value).__name__} has no CBOR form here")


def dumps(value: Any) -> bytes:
    """The CBOR of `value` (checked by the caller: see :mod:`atrium.values`)."""
    out: List[bytes] = []
    _encode(value, out)
    return b"".join(out)


def loads(data: bytes) -> Any:
    """One CBOR data item, exactly: anything after it, or anything not well-formed, raises
    ``ValueError``."""
    stream = io.BytesIO(data)
    try:
        item = cbor2.CBORDecoder(stream).decode()
    except Exception as error:  # cbor2 raises CBORDecodeError and, on odd input, others
        raise ValueError(f"not well-formed CBOR: {error}") from error
    if stream.tell() != len(data):
        raise ValueError(f"not well-formed CBOR: {len(data) - stream.tell()} bytes after the item")
    return item
