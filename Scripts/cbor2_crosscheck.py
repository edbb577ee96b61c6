#!/usr/bin/env python3
"""Cross-checks Atrium's CBOR ValueSet codec against the independent Python library cbor2.

Values travel between the two sides as JSON lines {"hex": <CBOR>, "expect": <tagged value>}.
The tagged form names each value's kind, so that nothing is lost to JSON:
  {"s": text} {"i": "decimal"} {"f": "float64 bits, hex"} {"b": bool}
  {"d": "float64 bits of the seconds since 1970, hex"} {"u": "uuid hex"} {"x": "bytes hex"}
  {"a": [tagged, ...]} {"m": [[key, tagged], ...]}

  cbor2_crosscheck.py check FILE            cbor2 decodes each line's hex; it must equal "expect"
  cbor2_crosscheck.py generate SEED COUNT   random values, encoded by cbor2, with their "expect"

Used by the Swift test suite (CrossCheckTests); needs `pip install cbor2`.
"""
import datetime
import json
import math
import random
import struct
import sys
import uuid

import cbor2

UTC = datetime.timezone.utc
INT64 = (-(2**63), 2**63 - 1)


def bits(value):
    return struct.pack(">d", value).hex()


def from_bits(text):
    return struct.unpack(">d", bytes.fromhex(text))[0]


def tag(value):
    """The tagged form of a value cbor2 decoded (or Python generated)."""
    if isinstance(value, bool):
        return {"b": value}
    if isinstance(value, int):
        return {"i": str(value)}
    if isinstance(value, float):
        return {"f": bits(value)}
    if isinstance(value, str):
        return {"s": value}
    if isinstance(value, (bytes, bytearray)):
        return {"x": bytes(value).hex()}
    if isinstance(value, datetime.datetime):
        return {"d": bits(value.timestamp())}
    if isinstance(value, uuid.UUID):
        return {"u": value.hex}
    if isinstance(value, list):
        return {"a": [tag(v) for v in value]}
    if isinstance(value, dict):
        return {"m": [[k, tag(v)] for k, v in value.items()]}
    raise TypeError(f"no ValueSet kind for {type(value).__name__}: {value!r}")


def same(expected, actual, path="message"):
    """None when equal, else a sentence saying where they differ."""
    (kind, want), = expected.items()
    (got_kind, got), = actual.items()
    if kind != got_kind:
        return f"{path}: expected kind {kind}, got {got_kind}"
    if kind == "f":
        a, b = from_bits(want), from_bits(got)
        if not (a == b or (math.isnan(a) and math.isnan(b))) or (a == 0 and math.copysign(1, a) != math.copysign(1, b)):
            return f"{path}: expected {a!r}, got {b!r}"
    elif kind == "d":
        a, b = from_bits(want), from_bits(got)
        # Python's datetime keeps microseconds: allow that rounding, no more.
        if abs(a - b) > 1e-6 * 1.5:
            return f"{path}: expected date {a!r}, got {b!r}"
    elif kind == "a":
        if len(want) != len(got):
            return f"{path}: expected {len(want)} elements, got {len(got)}"
        for i, (w, g) in enumerate(zip(want, got)):
            if (why := same(w, g, f"{path}[{i}]")) is not None:
                return why
    elif kind == "m":
        want_map, got_map = dict((k, v) for k, v in want), dict((k, v) for k, v in got)
        if set(want_map) != set(got_map):
            return f"{path}: expected keys {sorted(want_map)}, got {sorted(got_map)}"
        for k in want_map:
            if (why := same(want_map[k], got_map[k], f"{path}.{k}")) is not None:
                return why
    elif want != got:
        return f"{path}: expected {want!r}, got {got!r}"
    return None


def check(path):
    passed, failed = 0, 0
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            case = json.loads(line)
            try:
                why = same(case["expect"], tag(cbor2.loads(bytes.fromhex(case["hex"]))))
            except Exception as error:  # noqa: BLE001 - report every failure, go on
                why = f"cbor2 could not decode it: {error}"
            if why is None:
                passed += 1
            else:
                failed += 1
                print(f"line {number}: {why}\n  hex {case['hex']}", file=sys.stderr)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


class Generator:
    PIECES = ["", "a", "Type", "ping", "ü", "水", "𐅑", '"\\', " ", "e\u0301", "\u0000", "x" * 40]

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def text(self):
        return "".join(self.rng.choice(self.PIECES) for _ in range(self.rng.randint(0, 3)))

    def scalar(self, kind):
        r = self.rng
        if kind == "s":
            return self.text()
        if kind == "i":
            return r.choice([0, 1, -1, 23, 24, -24, -25, 255, 256, 65535, 65536, 2**32, INT64[0], INT64[1],
                             r.randint(-1000, 1000), r.randint(*INT64)])
        if kind == "f":
            return r.choice([0.0, -0.0, math.inf, -math.inf, math.nan, 1.5, 0.1, 65504.0, 1e300, 5e-324,
                             r.uniform(-1e6, 1e6), struct.unpack(">d", r.randbytes(8))[0]])
        if kind == "b":
            return r.random() < 0.5
        if kind == "d":
            seconds = r.choice([0, -1, 1363896240, -2208988800, 4102444800, r.randint(-2**31, 2**32)])
            micro = r.choice([0, 0, 500000, r.randint(0, 999999)])
            return datetime.datetime.fromtimestamp(seconds, UTC) + datetime.timedelta(microseconds=micro)
        if kind == "u":
            return uuid.UUID(bytes=r.randbytes(16))
        if kind == "x":
            return r.randbytes(r.randint(0, 20))
        raise ValueError(kind)

    def value(self, depth):
        kinds = ["s", "i", "f", "b", "d", "u", "x"] + (["a", "m"] if depth < 5 else [])
        kind = self.rng.choice(kinds)
        if kind == "m":
            return self.mapping(depth + 1)
        if kind == "a":
            count = self.rng.randint(0, 4)
            if depth + 1 < 5 and self.rng.random() < 0.3:
                return [self.mapping(depth + 2) for _ in range(count)]
            element = self.rng.choice(["s", "i", "f", "b", "d", "u", "x"])
            return [self.scalar(element) for _ in range(count)]
        return self.scalar(kind)

    def mapping(self, depth=1):
        return {self.text() + str(self.rng.randint(0, 99)): self.value(depth) for _ in range(self.rng.randint(0, 6))}


def generate(seed, count):
    generator = Generator(seed)
    for n in range(count):
        value = generator.mapping()
        encoded = cbor2.dumps(value, datetime_as_timestamp=True, canonical=(n % 2 == 1))
        print(json.dumps({"hex": encoded.hex(), "expect": tag(value)}, ensure_ascii=True))
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "check":
        return check(argv[2])
    if len(argv) == 4 and argv[1] == "generate":
        return generate(int(argv[2]), int(argv[3]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
