"""The protocol core, without I/O: CBOR as the host writes it, frames cut anywhere, ValueSet
kinds both ways, pairing codes."""
from __future__ import annotations

import datetime
import uuid

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
    assert values.from_wire(_cbor.loads(bytes.fromhex("a16161f97c00"))) == {"a": float("inf")}
    for hex_text, reason in [("a16161f6", "message.a: null is not a ValueSet kind"),
                             ("a161618201616b", "message.a: array mixes int and string"),
                             ("a16161c249" + "01" + "00" * 8, "message.a: integer 18446744073709551616 is outside"),
                             ("a16161d9ffff00", "message.a: CBORTag")]:
        with pytest.raises(InvalidValueError) as refused:
            values.from_wire(_cbor.loads(bytes.fromhex(hex_text)))
        assert reason in str(refused.value), refused.value


def test_pairing_codes_are_the_documented_derivation() -> None:
    host, client = "ab" * 32, "cd" * 32
    assert pairing.code(host, client, "01" * 32, "02" * 32) == "700969"
    assert pairing.code(host, client, "01" * 32, "03" * 32) == "441515"
    assert pairing.code_without_commitment(host, client) == "768863"
    assert pairing.commitment("01" * 32) == "c2f562ad9fee0208571ec1f672d4b3398ce74f2bacec06d0ea898df008602580"
    assert pairing.is_well_formed(pairing.make_nonce()) and pairing.make_nonce() != pairing.make_nonce()
