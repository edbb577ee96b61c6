"""CBOR as Atrium's host writes it (docs/PROTOCOL.md section 3): definite lengths, the
shortest head for every integer, length and tag, doubles in the shortest of float16,
float32 and float64 that holds them exactly (every NaN as ``f97e00``), dates as tag 1 over
an integer when whole, keys in the order given. Reading takes any well-formed encoding
(indefinite lengths, half floats, longer heads) of the kinds a frame or a ValueSet holds,
and refuses everything else with the path of what it refused."""
from __future__ import annotations

import datetime
import json
import math
import struct
import uuid
from typing import Any, Dict, List, Optional, Tuple, Union

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _head_bytes(major: int, number: int) -> bytes:
    if number < 24:
        return bytes((major << 5 | number,))
    if number < 1 << 8:
        return bytes((major << 5 | 24, number))
    if number < 1 << 16:
        return bytes((major << 5 | 25,)) + number.to_bytes(2, "big")
    if number < 1 << 32:
        return bytes((major << 5 | 26,)) + number.to_bytes(4, "big")
    return bytes((major << 5 | 27,)) + number.to_bytes(8, "big")


def _head(major: int, number: int, out: List[bytes]) -> None:
    out.append(_head_bytes(major, number))


# The encodings of small integers, and of the short texts seen most (keys, frame types),
# made once.
_SMALL_INTS = [_head_bytes(0, number) for number in range(256)]
_TEXTS: Dict[str, bytes] = {}


def _text(value: str) -> bytes:
    cached = _TEXTS.get(value)
    if cached is None:
        data = value.encode("utf-8")
        cached = _head_bytes(3, len(data)) + data
        if len(data) <= 32 and len(_TEXTS) < 4096:
            _TEXTS[value] = cached
    return cached


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
    kind = type(value)
    if kind is str:
        out.append(_text(value))
    elif kind is int:
        if 0 <= value < 256:
            out.append(_SMALL_INTS[value])
        elif value >= 0:
            _head(0, value, out)
        else:
            _head(1, -1 - value, out)
    elif kind is dict:
        _head(5, len(value), out)
        for key, element in value.items():
            _encode(key, out)
            _encode(element, out)
    elif value is True:
        out.append(b"\xf5")
    elif value is False:
        out.append(b"\xf4")
    elif isinstance(value, int):
        _encode(int(value), out)
    elif isinstance(value, float):
        _float(value, out)
    elif isinstance(value, str):
        out.append(_text(str(value)))
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


class Unsupported:
    """A value a frame may carry in a key this client does not use, but that no ValueSet
    holds (null, undefined, another simple value, another tag, a date Python cannot hold):
    what a lenient read gives in its place, refused only where a ValueSet is read."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"Unsupported({self.reason!r})"


# A path from the root, built only when something is refused: (parent, key or index).
_Path = Optional[Tuple[Any, Union[str, int]]]


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def path_text(root: str, path: _Path) -> str:
    parts: List[Union[str, int]] = []
    while path is not None:
        path, part = path
        parts.append(part)
    text = root
    for part in reversed(parts):
        text = f"{text}[{part}]" if isinstance(part, int) else _key_path(text, part)
    return text


class _Reader:
    """Reads one data item of RFC 8949: well-formed (section 5.3.1, Appendix F), text keys,
    no key twice, maps and arrays no deeper than `max_depth`, at most `max_items` items in
    all. Strictly (a ValueSet), what no ValueSet holds is refused; leniently (a frame), it is
    read as an :class:`Unsupported` in its place. Errors name the path from `root`."""

    def __init__(self, data: bytes, root: str, max_depth: int, max_items: int, strict: bool) -> None:
        self.data = data
        self.offset = 0
        self.root = root
        self.max_depth = max_depth
        self.items_left = max_items
        self.strict = strict

    def fail(self, path: _Path, reason: str) -> ValueError:
        return ValueError(f"{path_text(self.root, path)}: {reason}")

    def unsupported(self, path: _Path, reason: str) -> Unsupported:
        if self.strict:
            raise self.fail(path, reason)
        return Unsupported(reason)

    def take(self, count: int, path: _Path) -> bytes:
        if count > len(self.data) - self.offset:
            raise self.fail(path, f"the data ends {count - (len(self.data) - self.offset)} bytes short (at byte "
                                  f"{self.offset})")
        taken = self.data[self.offset:self.offset + count]
        self.offset += count
        return taken

    def head(self, path: _Path) -> "tuple[int, int, int | None]":
        """(major, additional information, argument); the argument is None for an
        indefinite length (additional information 31)."""
        if self.offset >= len(self.data):
            raise self.fail(path, f"the data ends where an item should begin (at byte {self.offset})")
        initial = self.data[self.offset]
        self.offset += 1
        major, info = initial >> 5, initial & 0x1F
        if info < 24:
            return major, info, info
        if info <= 27:
            return major, info, int.from_bytes(self.take(1 << (info - 24), path), "big")
        if info == 31:
            return major, info, None
        raise self.fail(path, f"reserved additional information {info} in initial byte 0x{initial:02x} (at byte "
                              f"{self.offset - 1})")

    def item(self, path: _Path, depth: int) -> Any:
        """The item at `path`; `depth` counts the maps and arrays around it."""
        self.items_left -= 1
        if self.items_left < 0:
            raise self.fail(path, "more items than a frame may hold")
        start = self.offset
        # The items seen most, read at once: small unsigned integers and short texts.
        if start < len(self.data):
            initial = self.data[start]
            if initial < 0x18:
                self.offset = start + 1
                return initial
            if 0x60 <= initial < 0x78 and start + 1 + initial - 0x60 <= len(self.data):
                self.offset = start + 1 + initial - 0x60
                try:
                    return self.data[start + 1:self.offset].decode("utf-8")
                except UnicodeDecodeError:
                    raise self.fail(path, "text that is not valid UTF-8") from None
        major, info, argument = self.head(path)
        if major in (4, 5) and depth + 1 > self.max_depth:
            raise self.fail(path, f"maps and arrays nest deeper than {self.max_depth} levels")
        if major == 0:
            if argument is None:
                raise self.fail(path, "an integer cannot have an indefinite length")
            return argument
        if major == 1:
            if argument is None:
                raise self.fail(path, "an integer cannot have an indefinite length")
            return -1 - argument
        if major in (2, 3):
            if argument is None:
                chunks = []
                while not self.at_break(path):
                    chunk_major, _, chunk_length = self.head(path)
                    if chunk_major != major or chunk_length is None:
                        raise self.fail(path, "a chunk of an indefinite-length string is not a definite string "
                                              "of the same type")
                    chunks.append(self.take(chunk_length, path))
                raw = b"".join(chunks)
            else:
                raw = self.take(argument, path)
            if major == 2:
                return raw
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                raise self.fail(path, "text that is not valid UTF-8") from None
        if major == 4:
            if argument is not None and argument > len(self.data) - self.offset:
                raise self.fail(path, f"an array of {argument} items in {len(self.data) - self.offset} bytes")
            elements: List[Any] = []
            while argument is None or len(elements) < argument:
                if argument is None and self.at_break(path):
                    break
                elements.append(self.item((path, len(elements)), depth + 1))
            return elements
        if major == 5:
            if argument is not None and argument * 2 > len(self.data) - self.offset:
                raise self.fail(path, f"a map of {argument} pairs in {len(self.data) - self.offset} bytes")
            found: Dict[str, Any] = {}
            while argument is None or len(found) < argument:
                if argument is None and self.at_break(path):
                    break
                key = self.item(path, depth + 1)
                if not isinstance(key, str):
                    raise self.fail(path, f"a key that is not text ({type(key).__name__})")
                if key in found:
                    raise self.fail(path, f"duplicate key {json.dumps(key, ensure_ascii=False)}")
                found[key] = self.item((path, key), depth + 1)
            return found
        if major == 6:
            if argument is None:
                raise self.fail(path, "a tag cannot have an indefinite length")
            content = self.item(path, depth)
            if argument == 1:
                if isinstance(content, bool) or not isinstance(content, (int, float)):
                    return self.unsupported(path, f"tag 1 (date) must hold a number, not {type(content).__name__}")
                moment = _date(content)
                return moment if moment is not None else self.unsupported(
                    path, f"date {content} is outside the years Python can hold")
            if argument == 37:
                if not isinstance(content, bytes) or len(content) != 16:
                    size = f"{len(content)}" if isinstance(content, bytes) else "no"
                    return self.unsupported(path, f"tag 37 (uuid) must hold 16 bytes, not {size}")
                return uuid.UUID(bytes=content)
            return self.unsupported(path, f"tag {argument} is not a ValueSet kind")
        # Major type 7: simple values and floats.
        if info == 20:
            return False
        if info == 21:
            return True
        if info == 25:
            return struct.unpack(">e", self.data[start + 1:start + 3])[0]
        if info == 26:
            return struct.unpack(">f", self.data[start + 1:start + 5])[0]
        if info == 27:
            return struct.unpack(">d", self.data[start + 1:start + 9])[0]
        if info == 31:
            raise self.fail(path, f"a break code where no indefinite-length item is open (at byte {start})")
        if info == 24 and argument is not None and argument < 32:
            raise self.fail(path, f"simple value {argument} in two bytes is not well-formed")
        if info == 22:
            return self.unsupported(path, "null is not a ValueSet kind")
        if info == 23:
            return self.unsupported(path, "undefined is not a ValueSet kind")
        return self.unsupported(path, f"simple value {argument} is not a ValueSet kind")

    def at_break(self, path: _Path) -> bool:
        if self.offset >= len(self.data):
            raise self.fail(path, f"the data ends inside an indefinite-length item (at byte {self.offset})")
        if self.data[self.offset] == 0xFF:
            self.offset += 1
            return True
        return False


def _date(seconds: "int | float") -> Optional[datetime.datetime]:
    """An aware datetime `seconds` after 1970-01-01 UTC, or None where Python has none."""
    try:
        if isinstance(seconds, int):
            return EPOCH + datetime.timedelta(seconds=seconds)
        if math.isnan(seconds) or math.isinf(seconds):
            return None
        whole = math.floor(seconds)
        return EPOCH + datetime.timedelta(seconds=whole, microseconds=round((seconds - whole) * 1_000_000))
    except OverflowError:
        return None


def loads(data: bytes, root: str = "value", max_depth: int = 512, max_items: int = 1 << 20,
          strict: bool = True) -> Any:
    """One CBOR data item, exactly, read as :class:`_Reader` says: anything not
    well-formed, over the limits, (strictly) not of a ValueSet's kinds, or followed by more
    bytes raises ``ValueError`` naming the path from `root`."""
    reader = _Reader(bytes(data), root, max_depth, max_items, strict)
    item = reader.item(None, 0)
    if reader.offset != len(reader.data):
        raise ValueError(f"{root}: {len(reader.data) - reader.offset} bytes after the item")
    return item
