"""The conformance vectors (conformance/ at the repository's root), read with this client:
ValueSets and their CBOR, frames, pairing codes, and the scripted exchange with a real host."""
from __future__ import annotations

import json
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from atrium import _cbor, frames, pairing, values
from atrium.errors import InvalidValueError

from conftest import Host

VECTORS = Path(__file__).resolve().parents[3] / "conformance"
sys.path.insert(0, str(VECTORS))
from make_vectors import typed  # noqa: E402  (the vectors' JSON form of a value, defined once)


def load(name: str) -> Any:
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))


def value_of(typed: Any) -> Any:
    """A value from the vectors' JSON form."""
    ((kind, text),) = typed.items()
    if kind == "string":
        return text
    if kind == "int":
        return int(text)
    if kind == "double":
        return float(text)
    if kind == "bool":
        return text
    if kind == "bytes":
        return bytes.fromhex(text)
    if kind == "date":
        seconds = float(text) if "." in text or "e" in text else int(text)
        return _cbor._date(seconds)
    if kind == "uuid":
        return uuid.UUID(text)
    if kind == "array":
        return [value_of(element) for element in text]
    if kind == "map":
        return {key: value_of(element) for key, element in text}
    raise AssertionError(f"unknown kind {kind}")


def test_valuesets_are_written_read_and_refused_as_the_vectors_say() -> None:
    document = load("valuesets.json")
    for vector in document["encodings"]:
        value = value_of(vector["value"])
        assert values.encode(value).hex() == vector["cbor"], vector["name"]
        assert typed(values.decode(bytes.fromhex(vector["cbor"]))) == vector["value"], vector["name"]
    for vector in document["decodings"]:
        assert typed(values.decode(bytes.fromhex(vector["cbor"]))) == vector["value"], vector["name"]
    for vector in document["refusals"]:
        with pytest.raises(InvalidValueError) as refused:
            values.decode(bytes.fromhex(vector["cbor"]))
        assert refused.value.path == vector["path"], vector["name"]
    assert len(document["encodings"]) >= 15 and len(document["refusals"]) >= 15


def test_frames_are_read_and_written_as_the_vectors_say() -> None:
    for vector in load("frames.json")["frames"]:
        data = bytes.fromhex(vector["bytes"])
        (read,) = frames.FrameReader().feed(data)
        assert typed(read) == vector["frame"], vector["name"]
        assert frames.encode(value_of(vector["frame"])) == data, vector["name"]


def test_pairing_codes_and_commitments_are_the_vectors() -> None:
    for vector in load("pairing.json")["pairings"]:
        assert pairing.commitment(vector["clientNonce"]) == vector["commitment"]
        assert pairing.code(vector["host"], vector["client"], vector["clientNonce"], vector["hostNonce"]) == vector["code"]
        assert pairing.code_without_commitment(vector["host"], vector["client"]) == vector["codeV1"]


def matches(pattern: Any, value: Any) -> bool:
    if "any" in pattern:
        kinds = {"string": str, "int": int, "map": dict, "array": list}
        return isinstance(value, kinds[pattern["any"]]) and not isinstance(value, bool)
    if "map" in pattern:
        return isinstance(value, dict) and all(key in value and matches(element, value[key])
                                               for key, element in pattern["map"])
    return typed(value) == pattern


def test_the_scripted_exchange_with_a_real_host() -> None:
    document = load("exchange.json")
    host = Host([])  # plain TCP on loopback, as the exchange says
    try:
        with socket.create_connection(("127.0.0.1", host.port), timeout=10) as connection:
            reader = frames.FrameReader()
            received: list = []
            for index, step in enumerate(document["steps"]):
                if "send" in step:
                    connection.sendall(frames.encode(value_of(step["send"])))
                elif "sendBytes" in step:
                    connection.sendall(bytes.fromhex(step["sendBytes"]))
                else:
                    while not received:
                        data = connection.recv(1 << 16)
                        assert data, f"step {index}: the host closed the connection"
                        received += reader.feed(data)
                    frame = received.pop(0)
                    assert matches(step["expect"], frame), (index, step["expect"], frame)
            assert not received
    finally:
        host.stop()
