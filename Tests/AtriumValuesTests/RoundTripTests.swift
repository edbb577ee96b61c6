import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// Values survive encode then decode with their kind and value, edges included.
struct RoundTripTests {
    func roundTrip(_ set: ValueSet, sourceLocation: SourceLocation = #_sourceLocation) throws -> ValueSet {
        let decoded = try ValueSet(cbor: set.cborBytes())
        #expect(decoded == set, sourceLocation: sourceLocation)
        #expect(decoded.keys == set.keys, "key order is kept", sourceLocation: sourceLocation)
        return decoded
    }

    @Test func generatedValueSets() throws {
        var generator = ValueGenerator(seed: 0xA7_21_03)
        for _ in 0..<2_000 {
            let set = generator.valueSet()
            let decoded = try roundTrip(set)
            #expect(decoded.cborBytes() == set.cborBytes(), "encoding is deterministic")
            var appended: [UInt8] = []
            set.encode(into: &appended)
            #expect(appended == set.cborBytes(), "the sized writer and the appending writer agree")
            #expect(set.encodedSize == appended.count)
        }
    }

    @Test func integerEdges() throws {
        let edges: [Int64] = [
            .min, .min + 1, -4_294_967_297, -4_294_967_296, -65537, -65536, -257, -256, -25, -24, -1, 0,
            23, 24, 255, 256, 65535, 65536, 4_294_967_295, 4_294_967_296, .max - 1, .max,
        ]
        let set = ValueSet(edges.enumerated().map { ("i\($0.offset)", Value.int($0.element)) })
        let decoded = try roundTrip(set)
        for (position, edge) in edges.enumerated() {
            #expect(decoded["i\(position)"]?.int == edge)
        }
        #expect(Value.int(.max).cborBytes() == bytes(hex: "1b7fffffffffffffff"))
        #expect(Value.int(.min).cborBytes() == bytes(hex: "3b7fffffffffffffff"))
    }

    @Test func doubleEdges() throws {
        let set: ValueSet = [
            "negZero": -0.0, "nan": .double(.nan), "inf": .double(.infinity), "ninf": .double(-.infinity),
            "tiny": .double(.leastNonzeroMagnitude), "huge": .double(.greatestFiniteMagnitude),
            "third": .double(1.0 / 3),
        ]
        let decoded = try roundTrip(set)
        #expect(decoded["negZero"]?.double?.sign == .minus)
        #expect(decoded["nan"]?.double?.isNaN == true)
        #expect(decoded["third"]?.double == 1.0 / 3)
        // A whole double stays a double: it is not written as an integer.
        #expect(try Value(cbor: Value.double(3).cborBytes()) == .double(3))
        #expect(Value.double(3).cborBytes() == bytes(hex: "f94200"))
    }

    @Test func stringsBytesAndEmpties() throws {
        let set: ValueSet = [
            "": "", "ünïcødé 水 𐅑": "é\u{301}", "nul": "a\u{0}b", "bytes": .bytes([0, 255]),
            "noBytes": .bytes([]), "noArray": [], "noMap": .map([:]), "strings": ["", "x"],
        ]
        let decoded = try roundTrip(set)
        #expect(decoded["ünïcødé 水 𐅑"]?.string == "é\u{301}")
        #expect(decoded["noArray"]?.array?.isEmpty == true)
        #expect(decoded["noArray"]?.array?.strings == [], "an empty array reads as any kind")
    }

    @Test func datesKeepTheirKindAndFraction() throws {
        let seconds: [Double] = [0, -1, -0.25, -2_208_988_800, 1_363_896_240, 1_363_896_240.5, 4_102_444_800.125, 1e-3]
        let set = ValueSet(
            seconds.enumerated().map { ("d\($0.offset)", Value.date(Timestamp(secondsSince1970: $0.element))) })
        let decoded = try roundTrip(set)
        for (position, value) in seconds.enumerated() {
            #expect(decoded["d\(position)"]?.timestamp?.secondsSince1970 == value)
        }
        // Whole seconds go out as an integer under tag 1, fractions as a float.
        #expect(Value.date(Timestamp(secondsSince1970: 1_363_896_240)).cborBytes() == bytes(hex: "c11a514b67b0"))
        #expect(
            Value.date(Timestamp(secondsSince1970: 1_363_896_240.5)).cborBytes() == bytes(hex: "c1fb41d452d9ec200000"))
        #expect(Value.date(Timestamp(secondsSince1970: -1)).cborBytes() == bytes(hex: "c120"))
    }

    @Test func uuidsAreTag37() throws {
        let uuid = UUID(uuidString: "F81D4FAE-7DEC-11D0-A765-00A0C91E6BF6")!
        let encoded = Value.uuid(uuid).cborBytes()
        #expect(encoded == bytes(hex: "d82550f81d4fae7dec11d0a76500a0c91e6bf6"))
        #expect(try Value(cbor: encoded) == .uuid(uuid))
    }

    /// Maps (odd levels) and arrays (even levels) nested `levels` deep, the outer map being
    /// level 1.
    func nested(levels: Int) -> ValueSet {
        func level(_ n: Int) -> Value {
            if n == levels { return n % 2 == 1 ? .map(["v": "leaf"]) : ["leaf"] }
            let inner = level(n + 1)
            return n % 2 == 1 ? .map(["v": inner]) : .array(ValueArray(maps: [inner.map!]))
        }
        return level(1).map!
    }

    @Test func depth32IsAcceptedAnd33IsRefused() throws {
        _ = try roundTrip(nested(levels: 32))
        let tooDeep = nested(levels: 33).cborBytes()
        let error = try #require(decodingError { _ = try ValueSet(cbor: tooDeep) })
        #expect(error.code == .nestingTooDeep)
        #expect(error.reason == "maps and arrays nest deeper than 32 levels")
        #expect(error.pathDescription == "message" + String(repeating: ".v[0]", count: 16))
    }

    @Test func mapsNestedOnlyInMapsCountToo() throws {
        var value: Value = 1
        for _ in 0..<31 { value = .map(["m": value]) }
        let ok = ValueSet(["m": value].map { ($0.key, $0.value) })
        #expect(try ValueSet(cbor: ok.cborBytes()) == ok)
        let tooDeep: ValueSet = ["m": .map(ok)]
        #expect(decodingError { _ = try ValueSet(cbor: tooDeep.cborBytes()) }?.code == .nestingTooDeep)
    }

    @Test func largeMapsUseTheIndex() throws {
        var set = ValueSet()
        for i in 0..<5_000 { set["key\(i)"] = .int(Int64(i)) }
        let decoded = try roundTrip(set)
        #expect(decoded["key4999"] == 4999)
        set["key17"] = nil
        #expect(set.count == 4_999 && set["key17"] == nil && set["key18"] == 18)
    }
}

extension ValueSet {
    init(_ pairs: [(String, Value)]) {
        self.init()
        for (key, value) in pairs { self[key] = value }
    }
}
