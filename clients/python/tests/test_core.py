"""The protocol core, without I/O: CBOR as the host writes it, frames cut anywhere, ValueSet
kinds both ways, pairing codes."""
from __future__ import annotations

import datetime
import json
import random
import uuid
from pathlib import Path

import pytest

from atrium import _cbor, frames, pairing, values
from atrium.errors import AtriumError, InvalidValueError


def test_cbor_is_written_as_the_host_writes_it() -> None:
    # RFC 8949 Appendix A, in preferred serialization.
    for value, hex_text in [(0, "00"), (23, "17"), (24, "1818"), (1000000, "1a000f4240"),
                            (-(2 ** 63), "3b7fffffffffffffff"), (1.5, "f93e00"), (100000.0, "fa47c35000"),
                            (1.1, "fb3ff199999999999a"), (float("inf"), "f97c00"), (float("nan"), "f97e00"),
                            (-4.0, "f9c400"), ("ü", "62c3bc"), (b"\x01\x02", "420102"), ([1, [2, 3]], "8201820203"),
                            ({"a": 1, "b": [2, 3]}, "a26161016162820203"), (True, "f5"), (False, "f4")]:
        assert _cbor.dumps(value).hex() == hex_text, value
    moment = datetime.datetime(2013, 3, 21, 20, 4, tzinfo=datetime.timezone.utc)
    assert _cbor.dumps(moment).hex() == "c11a514b67b0"
    assert _cbor.dumps(moment + datetime.timedelta(microseconds=500000)).hex() == "c1fb41d452d9ec200000"
    identity = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert _cbor.dumps(identity).hex() == "d82550" + identity.hex


def test_frames_come_out_whole_however_the_bytes_are_cut() -> None:
    sent = [{"type": "pong", "id": number} for number in range(5)]
    stream = b"".join(frames.encode(frame) for frame in sent)
    for cut in (1, 3, 4, 7, len(stream)):
        reader = frames.FrameReader()
        got = []
        for start in range(0, len(stream), cut):
            got += reader.feed(stream[start:start + cut])
        assert got == sent and reader.pending == 0
    assert frames.encode({"id": 1, "type": "ping"}).hex() == "0000000fa264747970656470696e6762696401"


def test_frames_the_contract_does_not_allow_are_refused() -> None:
    for body, reason in [(b"\x83\x01\x02\x03", "not a map"), (b"\xa1\x01\x02", "not text"),
                         (b"\xa1\x62id\x01", "without a text 'type'"), (b"\x1c", "not well-formed"),
                         (b"\xa1\x64type\x64pong\x00", "not well-formed")]:
        with pytest.raises(AtriumError) as refused:
            frames.FrameReader().feed(len(body).to_bytes(4, "big") + body)
        assert reason in str(refused.value), (body, refused.value)
    with pytest.raises(AtriumError, match="over the limit"):
        frames.FrameReader(max_frame_bytes=10).feed(b"\x00\x00\x00\x0b")


def test_what_the_host_sends_is_checked_as_a_valueset() -> None:
    assert values.decode(bytes.fromhex("a16161f97c00")) == {"a": float("inf")}
    for hex_text, reason in [("a16161f6", "message.a: null is not a ValueSet kind"),
                             ("a161618201616b", "message.a[1]: array mixes int and string"),
                             ("a16161c249" + "01" + "00" * 8, "message.a: tag 2 is not a ValueSet kind"),
                             ("a161611b8000000000000000", "message.a: integer 9223372036854775808 is outside"),
                             ("a16161d9ffff00", "message.a: tag 65535 is not a ValueSet kind")]:
        with pytest.raises(InvalidValueError) as refused:
            values.decode(bytes.fromhex(hex_text))
        assert reason in str(refused.value), refused.value


def test_pairing_codes_are_the_documented_derivation() -> None:
    host, client = "ab" * 32, "cd" * 32
    assert pairing.code(host, client, "01" * 32, "02" * 32) == "700969"
    assert pairing.code(host, client, "01" * 32, "03" * 32) == "441515"
    assert pairing.code_without_commitment(host, client) == "768863"
    assert pairing.commitment("01" * 32) == "c2f562ad9fee0208571ec1f672d4b3398ce74f2bacec06d0ea898df008602580"
    assert pairing.is_well_formed(pairing.make_nonce()) and pairing.make_nonce() != pairing.make_nonce()


TESTDATA = Path(__file__).resolve().parents[3].parent / "shared" / "testdata"


def test_every_sequence_that_is_not_well_formed_is_refused_cleanly() -> None:
    cases = json.loads((TESTDATA / "cbor-not-well-formed.json").read_text())
    assert len(cases) == 568
    for case in cases:
        with pytest.raises(ValueError):
            _cbor.loads(bytes.fromhex(case["hex"]))


def test_rfc_8949_appendix_a_reads_as_its_values() -> None:
    read = 0
    for case in json.loads((TESTDATA / "cbor-appendix-a.json").read_text()):
        data = bytes.fromhex(case["hex"])
        if "decoded" not in case:
            continue  # diagnostic only: simple values, tags and floats JSON cannot hold
        expected = case["decoded"]
        try:
            value = _cbor.loads(data)
        except ValueError as error:
            # Kinds a frame or ValueSet cannot hold (null, bignums, tags other than 1 and 37).
            assert expected is None or "tag" in str(error) or "simple" in str(error), (case, error)
            continue
        assert value == expected, case
        if case["roundtrip"] and not isinstance(value, float):
            assert _cbor.dumps(value) == data, case
        read += 1
    assert read > 50


def test_cbor2_reads_what_this_client_writes_and_the_reverse() -> None:
    cbor2 = pytest.importorskip("cbor2")
    generator = random.Random(8949)

    def scalar(kind: str) -> object:
        return {
            "int": lambda: generator.randint(-(2 ** 63), 2 ** 63 - 1),
            "double": lambda: generator.choice([generator.uniform(-1e6, 1e6), 0.5, -0.0, 65504.0, 1e300]),
            "string": lambda: "".join(chr(generator.randint(32, 0x2FFF)) for _ in range(generator.randint(0, 30))),
            "bytes": lambda: bytes(generator.randint(0, 255) for _ in range(generator.randint(0, 40))),
            "bool": lambda: generator.random() < 0.5,
            "uuid": lambda: uuid.UUID(int=generator.getrandbits(128)),
        }[kind]()

    for _ in range(300):
        message = {}
        for index in range(generator.randint(0, 8)):
            kind = generator.choice(["int", "double", "string", "bytes", "bool", "uuid", "array", "map"])
            if kind == "array":
                element = generator.choice(["int", "string", "double"])
                message[f"k{index}"] = [scalar(element) for _ in range(generator.randint(0, 5))]
            elif kind == "map":
                message[f"k{index}"] = {"inner": scalar("string"), "n": scalar("int")}
            else:
                message[f"k{index}"] = scalar(kind)
        encoded = values.encode(message)
        assert cbor2.loads(encoded) == message
        assert values.decode(cbor2.dumps(message)) == message
        assert values.decode(encoded) == message
