"""Frames (CONTRACT sections 1 and 2): a 4-byte big-endian length, then one CBOR map with
text keys and a ``type``. No I/O here: :func:`encode` makes a frame's bytes, and a
:class:`FrameReader` is fed what arrives and gives whole frames."""
from __future__ import annotations

import struct
from typing import Any, Dict, List

from . import _cbor
from .errors import AtriumError

Frame = Dict[str, Any]

#: The host's default hard frame limit; a host announces its own in ``welcome``.
DEFAULT_MAX_FRAME_BYTES = 4 << 20
#: The most this client takes in one frame, whatever a host announces.
MAX_FRAME_BYTES = 64 << 20


def encode(frame: Frame) -> bytes:
    """The bytes of `frame` on the wire, ``type`` first. Values inside are not checked as a
    ValueSet here: :func:`atrium.values.check` does that for messages."""
    if not isinstance(frame.get("type"), str):
        raise ValueError("a frame has a text 'type'")
    ordered = {"type": frame["type"]}
    ordered.update((key, value) for key, value in frame.items() if key != "type")
    body = _cbor.dumps(ordered)
    return struct.pack(">I", len(body)) + body


def decode(body: bytes) -> Frame:
    """One frame's body (without its length): a map with text keys and a text ``type``."""
    if not body:
        raise AtriumError("protocol_error", "the host sent an empty frame")
    try:
        # Leniently: a value no ValueSet holds, in a key this client does not use, is no
        # error (a newer host may send one); where a message is read, it is refused there.
        item = _cbor.loads(body, root="frame", strict=False)
    except ValueError as error:
        raise AtriumError("protocol_error", f"the host sent a frame that is not well-formed or not "
                                            f"of the contract's kinds: {error}") from error
    if not isinstance(item, dict):
        raise AtriumError("protocol_error", f"the host sent a frame that is a {type(item).__name__}, not a map")
    if not all(isinstance(key, str) for key in item):
        raise AtriumError("protocol_error", "the host sent a frame with a key that is not text")
    if not isinstance(item.get("type"), str):
        raise AtriumError("protocol_error", "the host sent a frame without a text 'type'")
    return item


class FrameReader:
    """Whole frames out of bytes as they arrive, none over `max_frame_bytes`."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = min(max_frame_bytes, MAX_FRAME_BYTES)
        self._buffer = bytearray()

    def feed(self, data: bytes) -> List[Frame]:
        """Takes `data`; returns the frames it completed, in order."""
        self._buffer += data
        frames: List[Frame] = []
        while len(self._buffer) >= 4:
            (length,) = struct.unpack_from(">I", self._buffer)
            if length > self.max_frame_bytes:
                raise AtriumError(
                    "protocol_error",
                    f"the host sent a frame of {length} bytes, over the limit of {self.max_frame_bytes}")
            if len(self._buffer) < 4 + length:
                break
            body = bytes(self._buffer[4:4 + length])
            del self._buffer[:4 + length]
            frames.append(decode(body))
        return frames

    @property
    def pending(self) -> int:
        """Bytes held of a frame not yet whole."""
        return len(self._buffer)
