#!/usr/bin/env python3
"""Writes the conformance vectors of this folder (see README.md) from the cases below, with
the Python client's encoder (clients/python). They are checked, not trusted: the Swift tests
read every file with the host's own codec (ConformanceTests), and the Python tests with the
Python client's. Run it again only to add cases; an existing vector never changes.

    python3 conformance/make_vectors.py
"""
from __future__ import annotations

import datetime
import json
import math
import os
import sys
import uuid
from typing import Any, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python", "src"))
from atrium import _cbor, frames, pairing, values  # noqa: E402

UTC = datetime.timezone.utc


def typed(value: Any) -> Any:
    """A value in the vectors' JSON form, its kind named (README.md)."""
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": str(value)}
    if isinstance(value, float):
        return {"double": "nan" if math.isnan(value) else repr(value)}
    if isinstance(value, str):
        return {"string": value}
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, datetime.datetime):
        return {"date": str(_cbor.seconds_since_epoch(value))}
    if isinstance(value, uuid.UUID):
        return {"uuid": str(value)}
    if isinstance(value, list):
        return {"array": [typed(element) for element in value]}
    if isinstance(value, dict):
        return {"map": [[key, typed(element)] for key, element in value.items()]}
    raise TypeError(value)


def date(*fields: int) -> datetime.datetime:
    return datetime.datetime(*fields, tzinfo=UTC)


def nested(levels: int) -> dict:
    message: dict = {}
    inner = message
    for _ in range(levels - 1):
        inner["v"] = {}
        inner = inner["v"]
    inner["end"] = True
    return message


ENCODINGS: List[Tuple[str, dict]] = [
    ("empty message", {}),
    ("text", {"a": "", "b": "plain", "c": "ünï 水 🦊", "long": "x" * 30}),
    ("ints at each head size", {"0": 0, "23": 23, "24": 24, "255": 255, "256": 256, "65535": 65535,
                                "65536": 65536, "4294967295": 4294967295, "4294967296": 4294967296}),
    ("negative ints at each head size", {"-1": -1, "-24": -24, "-25": -25, "-256": -256, "-257": -257,
                                         "-65537": -65537, "-4294967297": -4294967297}),
    ("Int64 limits", {"max": 2 ** 63 - 1, "min": -(2 ** 63)}),
    ("doubles in their shortest exact form", {"zero": 0.0, "negative zero": -0.0, "one": 1.0, "half": 1.5,
                                              "float16 max": 65504.0, "float16 subnormal": 5.960464477539063e-08,
                                              "float32": 100000.0, "float64": 1.1, "large": 1e300,
                                              "infinity": math.inf, "negative infinity": -math.inf}),
    ("NaN", {"nan": math.nan}),
    ("bools", {"yes": True, "no": False}),
    ("bytes", {"empty": b"", "some": bytes(range(0, 256, 15)), "long": bytes(40)}),
    ("dates: whole seconds as an integer, else the shortest exact float",
     {"epoch": date(1970, 1, 1), "whole": date(2013, 3, 21, 20, 4), "before 1970": date(1969, 12, 31, 23, 59, 59),
      "half second": date(2013, 3, 21, 20, 4, 0, 500000), "milliseconds": date(2026, 11, 21, 5, 0, 0, 250000)}),
    ("uuids", {"id": uuid.UUID("12345678-1234-5678-1234-567812345678"), "nil": uuid.UUID(int=0)}),
    ("arrays of one kind", {"ints": [1, -2, 3], "texts": ["a", "b"], "doubles": [0.5, 1.1], "bools": [True, False],
                            "bytes": [b"\x01", b""], "dates": [date(2020, 1, 1)], "uuids": [uuid.UUID(int=1)],
                            "maps": [{"a": 1}, {"b": "two"}], "empty": []}),
    ("nested maps", {"outer": {"inner": {"deepest": "here", "n": 1}}, "sibling": {}}),
    ("keys keep their order", {"z": 1, "a": 2, "m": 3}),
    ("32 levels of maps, the most a ValueSet holds", nested(32)),
    ("a Roman ping", {"Type": "ping", "CreationDate": date(2026, 11, 21, 5, 0, 0, 250000), "TargetId": "phone-1"}),
]

# (name, CBOR in hex, the value it reads as): well-formed encodings other than the one above.
DECODINGS: List[Tuple[str, str, dict]] = [
    ("an indefinite-length map", "bf616101616202ff", {"a": 1, "b": 2}),
    ("an indefinite-length text in chunks", "a1616b7f6261626163ff", {"k": "abc"}),
    ("an indefinite-length byte string", "a161625f4201024103ff", {"b": b"\x01\x02\x03"}),
    ("an indefinite-length array", "a161619f010203ff", {"a": [1, 2, 3]}),
    ("an integer in a longer head than needed", "a161611b0000000000000001", {"a": 1}),
    ("a length in a longer head than needed", "a17900016101", {"a": 1}),
    ("1.5 as a float64", "a16164fb3ff8000000000000", {"d": 1.5}),
    ("1.5 as a float32", "a16164fa3fc00000", {"d": 1.5}),
    ("a date as tag 1 over a float64 of whole seconds", "a16164c1fb41d452d9ec000000", {"d": date(2013, 3, 21, 20, 4)}),
    ("a date as tag 1 over a float16", "a16164c1f93c00", {"d": date(1970, 1, 1, 0, 0, 1)}),
    ("a date before 1970 as a negative integer", "a16164c120", {"d": date(1969, 12, 31, 23, 59, 59)}),
]

# (name, CBOR in hex, path, reason): well-formed CBOR that is not a ValueSet. A client must
# refuse each, naming the path.
REFUSALS: List[Tuple[str, str, str]] = [
    ("null", "a16161f6", "message.a"),
    ("undefined", "a16161f7", "message.a"),
    ("a simple value other than true and false", "a16161f0", "message.a"),
    ("an integer past Int64", "a161611b8000000000000000", "message.a"),
    ("an integer below Int64", "a161613b8000000000000000", "message.a"),
    ("a bignum (tag 2)", "a16161c249010000000000000000", "message.a"),
    ("another tag", "a16161d8636161", "message.a"),
    ("tag 37 over 2 bytes", "a16161d8254201 02".replace(" ", ""), "message.a"),
    ("tag 1 over text", "a16161c16474657874", "message.a"),
    ("a key that is not text", "a10101", "message"),
    ("a duplicate key", "a2616101616102", "message"),
    ("an array of two kinds", "a16161820161 62".replace(" ", ""), "message.a[1]"),
    ("an array of arrays", "a1616181820102", "message.a[0]"),
    ("a message that is not a map", "83010203", "message"),
    ("33 levels of maps", _cbor.dumps(nested(33)).hex(), "message" + ".v" * 32),
]

TRANSFER = uuid.UUID("6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9")
DIGEST = bytes.fromhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")

CLIENT_FRAMES: List[Tuple[str, dict]] = [
    ("hello", {"type": "hello", "version": 1, "clientId": "phone-1", "clientName": "Ana's phone"}),
    ("hello with a token", {"type": "hello", "version": 1, "clientId": "script", "token": "atr_0123456789abcdef"}),
    ("open", {"type": "open", "channel": 1, "service": "com.microsoft.test.cdppingpongservice",
              "package": "5085ShawnHenry.RomanTestApp_jsjw7knzsgcce"}),
    ("request", {"type": "request", "channel": 1, "id": 7,
                 "message": {"Type": "ping", "CreationDate": date(2026, 11, 21, 5, 0, 0, 250000), "Count": 3}}),
    ("response to the host's request", {"type": "response", "channel": 1, "id": 2, "status": 0,
                                        "message": {"Reply": "yes"}}),
    ("close", {"type": "close", "channel": 1}),
    ("launch", {"type": "launch", "id": 3, "uri": "roman-test:hello?x=1", "package": "atrium.examples.echo",
                "fallbackUri": "https://example.org/", "preferredPackages": ["a.b", "c.d"], "data": {"k": 1}}),
    ("apps", {"type": "apps", "id": 4}),
    ("apps of one package", {"type": "apps", "id": 5, "package": "atrium.examples.echo"}),
    ("ping", {"type": "ping", "id": 6}),
    ("pair", {"type": "pair", "id": 8, "deviceName": "Ana's phone",
              "commitment": pairing.commitment("01" * 32)}),
    ("pairReveal", {"type": "pairReveal", "id": 8, "nonce": "01" * 32}),
    ("admin", {"type": "admin", "id": 9, "command": "pairing.accept", "arguments": {"request": 1}}),
    # Transfers (CONTRACT section 8).
    ("attach", {"type": "attach", "id": 10, "transfer": TRANSFER, "offset": 1048576, "window": 4194304}),
    ("attach, an upload", {"type": "attach", "id": 11, "transfer": TRANSFER}),
    ("chunk of an upload", {"type": "chunk", "transfer": TRANSFER, "offset": 0, "data": bytes(range(16))}),
    ("last chunk of an upload", {"type": "chunk", "transfer": TRANSFER, "offset": 16, "data": b"end", "last": True,
                                 "digest": DIGEST}),
    ("ack of a download", {"type": "ack", "transfer": TRANSFER, "offset": 2097152, "window": 4194304}),
    ("detach", {"type": "detach", "transfer": TRANSFER}),
    ("cancelTransfer", {"type": "cancelTransfer", "transfer": TRANSFER}),
    ("transfers", {"type": "transfers", "id": 12, "since": 41, "forget": [TRANSFER]}),
    ("transfers, all", {"type": "transfers", "id": 13}),
    ("transferLink", {"type": "transferLink", "id": 14, "transfer": TRANSFER}),
    # A download started with its request (docs/PROTOCOL.md).
    ("request, starting its download", {"type": "request", "channel": 1, "id": 15,
                                        "message": {"Command": "get", "Name": "IMG_0001.HEIC"},
                                        "attach": {"window": 4194304}}),
    ("request, starting its download with the default window", {"type": "request", "channel": 1, "id": 16,
                                                                "message": {"Command": "get", "Name": "a.jpg"},
                                                                "attach": {}}),
]

HOST_FRAMES: List[Tuple[str, dict]] = [
    ("welcome", {"type": "welcome", "version": 1, "hostId": "3f1c2a9e", "hostName": "box", "platform": "linux",
                 "hostIdentity": "ab" * 32, "kind": "desktop", "responseTimeoutMs": 30000,
                 "limits": {"maxMessageBytes": 1048576, "maxFrameBytes": 4194304, "maxChannels": 64,
                            "maxInFlight": 256, "responseTimeoutSeconds": 30}}),
    ("opened", {"type": "opened", "channel": 1, "status": 0}),
    ("opened, refused", {"type": "opened", "channel": 3, "status": 1,
                         "error": 'no package "no.such.package" is installed'}),
    ("response", {"type": "response", "channel": 1, "id": 7, "status": 0,
                  "message": {"Type": "pong", "CreationDate": date(2026, 11, 21, 5, 0, 0, 250000)}}),
    ("response, failed", {"type": "response", "channel": 1, "id": 9, "status": 1, "message": {},
                          "error": "message.bad: null is not a ValueSet kind"}),
    ("request from the service", {"type": "request", "channel": 1, "id": 1, "message": {"Hello": "client"}}),
    ("closed", {"type": "closed", "channel": 1, "status": 1}),
    ("launched", {"type": "launched", "id": 3, "status": 1}),
    ("launched, refused", {"type": "launched", "id": 4, "status": 3, "error": "no app handles nobody:"}),
    ("apps", {"type": "apps", "id": 4, "apps": [
        {"package": "atrium.examples.echo", "displayName": "Echo", "services": ["atrium.echo"], "schemes": [],
         "state": "ready"},
        {"package": "5085ShawnHenry.RomanTestApp_jsjw7knzsgcce", "displayName": "Roman Test App",
         "services": ["com.microsoft.test.cdppingpongservice"], "schemes": ["roman-test"]}]}),
    ("pong", {"type": "pong", "id": 6}),
    ("pairNonce", {"type": "pairNonce", "id": 8, "nonce": "02" * 32}),
    ("paired", {"type": "paired", "id": 8, "status": 0}),
    ("paired, refused", {"type": "paired", "id": 9, "status": 1, "error": "the operator refused"}),
    ("adminResult", {"type": "adminResult", "id": 9, "status": 0, "result": {"accepted": True}}),
    ("error", {"type": "error", "code": "unknownType", "message": "unknown frame type \"nope\""}),
    # Transfers (CONTRACT section 8).
    ("attached, a download", {"type": "attached", "id": 10, "transfer": TRANSFER, "status": 0,
                              "direction": "download", "size": 5000000, "offset": 1048576, "chunkBytes": 262144,
                              "window": 4194304, "expires": date(2026, 12, 3, 9, 0), "name": "report.pdf",
                              "digest": DIGEST}),
    ("attached, an upload of unknown size", {"type": "attached", "id": 11, "transfer": TRANSFER, "status": 0,
                                             "direction": "upload", "size": -1, "offset": 0, "chunkBytes": 262144,
                                             "window": 4194304, "expires": date(2026, 12, 3, 9, 0)}),
    ("attached, refused", {"type": "attached", "id": 12, "transfer": TRANSFER, "status": 1, "direction": "download",
                           "size": 0, "offset": 0, "chunkBytes": 0, "window": 0,
                           "expires": date(2026, 12, 3, 9, 0), "error": "notFound"}),
    ("chunk of a download", {"type": "chunk", "transfer": TRANSFER, "offset": 1048576, "data": b"bytes"}),
    ("ack of an upload", {"type": "ack", "transfer": TRANSFER, "offset": 16, "window": 4194304}),
    ("transferState", {"type": "transferState", "transfer": TRANSFER, "state": "running", "offset": 2097152,
                       "size": 5000000}),
    ("transferState, completed with the service's result",
     {"type": "transferState", "transfer": TRANSFER, "state": "completed", "offset": 19, "size": 19,
      "result": {"Stored": "c.bin"}}),
    ("transferState, failed", {"type": "transferState", "transfer": TRANSFER, "state": "failed", "offset": 19,
                               "size": 19, "error": "digestMismatch"}),
    ("transfers", {"type": "transfers", "id": 13, "transfers": [
        {"transfer": TRANSFER, "state": "completed", "offset": 19, "size": 19, "result": {"Stored": "c.bin"}}],
        "cursor": 42}),
    ("transferLink", {"type": "transferLink", "id": 14, "status": 0,
                      "url": "https://192.168.1.20:7340/transfers/6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9",
                      "bearer": "q" * 43, "expires": date(2026, 12, 3, 9, 0)}),
    # A download started with its request (docs/PROTOCOL.md).
    ("response, its download attached", {"type": "response", "channel": 1, "id": 15, "status": 0,
                                         "message": {"Transfer": TRANSFER, "Size": 5000000},
                                         "attached": {"id": 15, "transfer": TRANSFER, "status": 0,
                                                      "direction": "download", "size": 5000000, "offset": 0,
                                                      "chunkBytes": 262144, "window": 4194304,
                                                      "expires": date(2026, 12, 3, 9, 0), "name": "IMG_0001.HEIC"}}),
    ("response, its download not attached", {"type": "response", "channel": 1, "id": 16, "status": 0,
                                             "message": {"Transfer": TRANSFER, "Size": 10},
                                             "attached": {"id": 16, "transfer": TRANSFER, "status": 2,
                                                          "direction": "download", "size": 10, "offset": 0,
                                                          "chunkBytes": 0, "window": 0,
                                                          "expires": date(2026, 12, 3, 9, 0),
                                                          "error": "this connection has 64 transfers attached, "
                                                                   "its limit"}}),
]

PAIRINGS = [
    ("ab" * 32, "cd" * 32, "01" * 32, "02" * 32),
    ("ab" * 32, "cd" * 32, "01" * 32, "03" * 32),
    ("0" * 63 + "1", "f" * 64, "9" * 64, "a" * 64),
    ("5d1e7c0b9a8f6e4d3c2b1a0918273645" * 2, "0a1b2c3d4e5f60718293a4b5c6d7e8f9" * 2,
     "6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b",
     "d4735e3a265e16eee03f59718b9b5d03019c07d8b6c51f90da3a666eec13ab35"),
]


def exchange() -> dict:
    """A short scripted exchange with a real host (see the document's `about`)."""
    when = date(2026, 11, 21, 5, 0, 0, 250000)
    every = {"text": "ünï 水", "int": -(2 ** 63), "double": 1.5, "bool": True, "bytes": b"\x00\xff", "date": when,
             "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"), "ints": [1, 2, 3], "maps": [{"a": 1}],
             "nested": {"deeper": {"ok": False}}}
    roman = ("5085ShawnHenry.RomanTestApp_jsjw7knzsgcce", "com.microsoft.test.cdppingpongservice")
    echo = ("atrium.examples.echo", "atrium.echo")
    steps: List[dict] = []

    def send(frame: dict) -> None:
        steps.append({"send": typed(frame)})

    def expect(fields: dict) -> None:
        steps.append({"expect": {"map": [[key, value if isinstance(value, dict) and "any" in value else typed(value)]
                                         for key, value in fields.items()]}})

    def kind(name: str) -> dict:
        return {"any": name}

    ping = {"Type": "ping", "CreationDate": when, "TargetId": "conformance"}
    send({"type": "hello", "version": 1, "clientId": "conformance"})
    expect({"type": "welcome", "version": 1, "hostId": kind("string"), "hostName": kind("string"),
            "platform": "linux", "limits": kind("map")})
    send({"type": "ping", "id": 1})
    expect({"type": "pong", "id": 1})
    send({"type": "open", "channel": 1, "service": roman[1], "package": roman[0]})
    expect({"type": "opened", "channel": 1, "status": 0})
    send({"type": "request", "channel": 1, "id": 2, "message": ping})
    expect({"type": "response", "channel": 1, "id": 2, "status": 0, "message": dict(ping, Type="pong")})
    send({"type": "open", "channel": 2, "service": echo[1], "package": echo[0]})
    expect({"type": "opened", "channel": 2, "status": 0})
    send({"type": "request", "channel": 2, "id": 3, "message": every})
    expect({"type": "response", "channel": 2, "id": 3, "status": 0, "message": every})
    # The message's value 1 made null: not a ValueSet, so status 1 with a reason.
    body = _cbor.dumps({"type": "request", "channel": 2, "id": 4, "message": {"ok": 1}})[:-1] + b"\xf6"
    steps.append({"sendBytes": (len(body).to_bytes(4, "big") + body).hex(),
                  "note": 'a request whose message holds a null: {"ok": null}'})
    expect({"type": "response", "channel": 2, "id": 4, "status": 1, "error": kind("string")})
    send({"type": "open", "channel": 3, "service": "x", "package": "no.such.package"})
    expect({"type": "opened", "channel": 3, "status": 1, "error": 'no package "no.such.package" is installed'})
    send({"type": "apps", "id": 5})
    expect({"type": "apps", "id": 5, "apps": kind("array")})
    send({"type": "nope"})
    expect({"type": "error", "code": "unknownType", "message": kind("string")})
    send({"type": "launch", "id": 6, "uri": "roman-test:conformance"})
    expect({"type": "launched", "id": 6, "status": 1})
    send({"type": "close", "channel": 1})
    send({"type": "ping", "id": 7})
    expect({"type": "pong", "id": 7})
    return {
        "about": "A short exchange with a host that serves this repository's manifests/echo.json and "
                 "manifests/roman-ping.json, over plain TCP on loopback (atriumd --manifests FOLDER --listen "
                 "127.0.0.1:0). In order: `send` a frame (its map), `sendBytes` these exact bytes, `expect` the next "
                 "frame from the host: it holds every key given, with that value or, for {\"any\": KIND}, a value "
                 "of that kind (string, int, map, array); it may hold other keys too.",
        "manifests": ["echo.json", "roman-ping.json"],
        "steps": steps,
    }


def write(name: str, document: dict) -> None:
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as file:
        json.dump(document, file, indent=1, ensure_ascii=False)
        file.write("\n")


def main() -> None:
    for name, cbor_hex, value in DECODINGS:
        assert values.decode(bytes.fromhex(cbor_hex)) == value, name
    refusals = []
    for name, cbor_hex, path in REFUSALS:
        try:
            values.decode(bytes.fromhex(cbor_hex))
        except values.InvalidValueError as error:
            assert error.path == path, (name, error.path, path)
            refusals.append({"name": name, "cbor": cbor_hex, "path": path, "reason": error.reason})
            continue
        raise AssertionError(f"{name} was not refused")
    write("valuesets.json", {
        "about": "ValueSets (CONTRACT section 3) and their CBOR. encodings: a client writes exactly `cbor` "
                 "for `value`, and reads `cbor` as `value`. decodings: other well-formed encodings a client "
                 "reads as `value`. refusals: well-formed CBOR that is not a ValueSet; a client refuses each, "
                 "naming `path` (`reason` is this implementation's words).",
        "encodings": [{"name": name, "value": typed(value), "cbor": values.encode(value).hex()}
                      for name, value in ENCODINGS],
        "decodings": [{"name": name, "cbor": cbor_hex, "value": typed(value)} for name, cbor_hex, value in DECODINGS],
        "refusals": refusals,
    })
    write("frames.json", {
        "about": "Frames (CONTRACT sections 1, 2, 7 and 8) as Atrium writes them: `bytes` is the frame on the "
                 "wire, its 4-byte length included; `frame` its map. A client reads `bytes` as `frame`; what it "
                 "writes for a client frame may order keys otherwise (the host reads any order), but Atrium's "
                 "own clients write exactly `bytes`.",
        "frames": [{"name": name, "sender": sender, "frame": typed(frame), "bytes": frames.encode(frame).hex()}
                   for sender, cases in (("client", CLIENT_FRAMES), ("host", HOST_FRAMES))
                   for name, frame in cases],
    })
    write("pairing.json", {
        "about": "Pairing (CONTRACT section 7, docs/SECURITY.md): the commitment a client sends for its nonce, "
                 "and the six digits both sides show, with a committed pairing (code) and without (codeV1).",
        "pairings": [{"host": host, "client": client, "clientNonce": client_nonce, "hostNonce": host_nonce,
                      "commitment": pairing.commitment(client_nonce),
                      "code": pairing.code(host, client, client_nonce, host_nonce),
                      "codeV1": pairing.code_without_commitment(host, client)}
                     for host, client, client_nonce, host_nonce in PAIRINGS],
    })
    write("exchange.json", exchange())


if __name__ == "__main__":
    main()
