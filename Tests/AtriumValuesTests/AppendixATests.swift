import AtriumValues
import Foundation
import Testing

/// RFC 8949 Appendix A, read as ValueSet values: every example of a ValueSet kind decodes to
/// the right value (and, where its encoding is the shortest form, encodes back to the same
/// bytes); every other example is refused with a reason.
struct AppendixATests {
    enum Expected {
        case value(Value)
        case refused(ValueSetError.Code, String)
    }

    static let notInt64 = Expected.refused(.notAValueSet, "outside the Int64 range")
    static let nestedArray = Expected.refused(.notAValueSet, "an array may not hold arrays")

    static func date(_ seconds: Double) -> Value { .date(Timestamp(secondsSince1970: seconds)) }
    static func ints(_ range: ClosedRange<Int64>) -> Value { .array(ValueArray(ints: Array(range))) }

    /// The expected reading of every example, by its hex encoding.
    static let expectations: [String: Expected] = [
        "00": .value(0), "01": .value(1), "0a": .value(10), "17": .value(23), "1818": .value(24),
        "1819": .value(25), "1864": .value(100), "1903e8": .value(1000), "1a000f4240": .value(1_000_000),
        "1b000000e8d4a51000": .value(1_000_000_000_000),
        "1bffffffffffffffff": notInt64,
        "c249010000000000000000": .refused(.notAValueSet, "tag 2 is not a ValueSet kind"),
        "3bffffffffffffffff": notInt64,
        "c349010000000000000000": .refused(.notAValueSet, "tag 3 is not a ValueSet kind"),
        "20": .value(-1), "29": .value(-10), "3863": .value(-100), "3903e7": .value(-1000),
        "f90000": .value(0.0), "f98000": .value(-0.0), "f93c00": .value(1.0), "fb3ff199999999999a": .value(1.1),
        "f93e00": .value(1.5), "f97bff": .value(65504.0), "fa47c35000": .value(100000.0),
        "fa7f7fffff": .value(3.4028234663852886e+38), "fb7e37e43c8800759c": .value(1.0e+300),
        "f90001": .value(5.960464477539063e-08), "f90400": .value(6.103515625e-05), "f9c400": .value(-4.0),
        "fbc010666666666666": .value(-4.1),
        "f97c00": .value(.double(.infinity)), "f97e00": .value(.double(.nan)), "f9fc00": .value(.double(-.infinity)),
        "fa7f800000": .value(.double(.infinity)), "fa7fc00000": .value(.double(.nan)),
        "faff800000": .value(.double(-.infinity)), "fb7ff0000000000000": .value(.double(.infinity)),
        "fb7ff8000000000000": .value(.double(.nan)), "fbfff0000000000000": .value(.double(-.infinity)),
        "f4": .value(false), "f5": .value(true),
        "f6": .refused(.notAValueSet, "null is not a ValueSet kind"),
        "f7": .refused(.notAValueSet, "undefined is not a ValueSet kind"),
        "f0": .refused(.notAValueSet, "simple value 16 is not a ValueSet kind"),
        // RFC 7049 listed simple(24) as 0xf818; RFC 8949 section 3.3 made that encoding not
        // well-formed, and the not-well-formed vectors list it too.
        "f818": .refused(.notWellFormed, "simple value 24 in the two-byte form"),
        "f8ff": .refused(.notAValueSet, "simple value 255 is not a ValueSet kind"),
        "c074323031332d30332d32315432303a30343a30305a": .refused(.notAValueSet, "tag 0 is not a ValueSet kind"),
        "c11a514b67b0": .value(date(1_363_896_240)),
        "c1fb41d452d9ec200000": .value(date(1_363_896_240.5)),
        "d74401020304": .refused(.notAValueSet, "tag 23 is not a ValueSet kind"),
        "d818456449455446": .refused(.notAValueSet, "tag 24 is not a ValueSet kind"),
        "d82076687474703a2f2f7777772e6578616d706c652e636f6d": .refused(.notAValueSet, "tag 32 is not a ValueSet kind"),
        "40": .value(.bytes([])), "4401020304": .value(.bytes([1, 2, 3, 4])),
        "60": .value(""), "6161": .value("a"), "6449455446": .value("IETF"), "62225c": .value("\"\\"),
        "62c3bc": .value("ü"), "63e6b0b4": .value("水"), "64f0908591": .value("𐅑"),
        "80": .value([]), "83010203": .value([1, 2, 3]),
        "8301820203820405": nestedArray,
        "98190102030405060708090a0b0c0d0e0f101112131415161718181819": .value(ints(1...25)),
        "a0": .value(.map([:])),
        "a201020304": .refused(.notAValueSet, "map keys must be text, but key 1 is an integer"),
        "a26161016162820203": .value(["a": 1, "b": [2, 3]]),
        "826161a161626163": .refused(.notAValueSet, "array mixes string and map"),
        "a56161614161626142616361436164614461656145": .value(["a": "A", "b": "B", "c": "C", "d": "D", "e": "E"]),
        "5f42010243030405ff": .value(.bytes([1, 2, 3, 4, 5])),
        "7f657374726561646d696e67ff": .value("streaming"),
        "9fff": .value([]),
        "9f018202039f0405ffff": nestedArray,
        "9f01820203820405ff": nestedArray,
        "83018202039f0405ff": nestedArray,
        "83019f0203ff820405": nestedArray,
        "9f0102030405060708090a0b0c0d0e0f101112131415161718181819ff": .value(ints(1...25)),
        "bf61610161629f0203ffff": .value(["a": 1, "b": [2, 3]]),
        "826161bf61626163ff": .refused(.notAValueSet, "array mixes string and map"),
        "bf6346756ef563416d7421ff": .value(["Fun": true, "Amt": -2]),
    ]

    struct Example: Sendable, CustomTestStringConvertible {
        let hex: String
        let roundtrip: Bool
        var testDescription: String { hex }
    }

    static func examples() throws -> [Example] {
        let list = try JSONSerialization.jsonObject(with: try testVector("cbor-appendix-a.json")) as! [[String: Any]]
        return list.map { Example(hex: $0["hex"] as! String, roundtrip: $0["roundtrip"] as! Bool) }
    }

    @Test func everyExampleHasAnExpectation() throws {
        let examples = try Self.examples()
        #expect(examples.count == 82)
        #expect(Set(examples.map(\.hex)) == Set(Self.expectations.keys))
    }

    @Test(arguments: try examples())
    func example(_ example: Example) throws {
        let encoded = bytes(hex: example.hex)
        let expected = try #require(Self.expectations[example.hex])
        switch expected {
        case .value(let value):
            let decoded = try Value(cbor: encoded)
            #expect(decoded == value)
            if case .double(let d) = value {
                #expect(decoded.double?.sign == d.sign, "the sign of \(d) is kept")
            }
            let reencoded = decoded.cborBytes()
            if example.roundtrip {
                #expect(hex(reencoded) == example.hex, "shortest form is written again")
            } else {
                #expect(try Value(cbor: reencoded) == value)
                #expect(reencoded.count <= encoded.count)
            }
        case .refused(let code, let reason):
            let error = try #require(decodingError { _ = try Value(cbor: encoded) } as ValueSetError?)
            #expect(error.code == code)
            #expect(error.reason.contains(reason), "\(error)")
        }
    }
}
