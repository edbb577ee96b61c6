import AtriumValues
import Foundation
import Testing

struct CodableTests {
    struct Ping: Codable, Equatable {
        var type: String
        var count: Int
        var ratio: Double
        var ok: Bool
        var when: Date
        var id: UUID
        var blob: Data
        var raw: [UInt8]
        var tags: [String]
        var nested: Inner
        var items: [Inner]
        var note: String?
        var small: UInt8

        enum CodingKeys: String, CodingKey {
            case type = "Type", count = "Count", ratio, ok, when, id, blob, raw, tags, nested, items, note, small
        }
    }

    struct Inner: Codable, Equatable {
        var name: String
        var scores: [Double]
    }

    static let sample = Ping(
        type: "ping", count: 3, ratio: 0.5, ok: true, when: Date(timeIntervalSince1970: 1_363_896_240.5),
        id: UUID(uuidString: "F81D4FAE-7DEC-11D0-A765-00A0C91E6BF6")!, blob: Data([1, 2]), raw: [3, 4],
        tags: ["a", "b"], nested: Inner(name: "n", scores: [1.5]), items: [Inner(name: "x", scores: [])],
        note: nil, small: 200
    )

    @Test func encodesToTheNaturalKinds() throws {
        let set = try ValueSetEncoder().encode(Self.sample)
        #expect(set["Type"] == "ping")
        #expect(set["Count"] == 3)
        #expect(set["ratio"] == 0.5)
        #expect(set["when"]?.timestamp == Timestamp(secondsSince1970: 1_363_896_240.5))
        #expect(set["id"]?.uuid == Self.sample.id)
        #expect(set["blob"] == .bytes([1, 2]))
        #expect(set["raw"] == .bytes([3, 4]))
        #expect(set["tags"] == ["a", "b"])
        #expect(set["nested"] == .map(["name": "n", "scores": [1.5]]))
        #expect(set["items"]?.array?.maps?.first == ["name": "x", "scores": []])
        #expect(set["note"] == nil, "nil optionals are left out")
        #expect(
            set.keys == [
                "Type", "Count", "ratio", "ok", "when", "id", "blob", "raw", "tags", "nested", "items", "small",
            ])
    }

    @Test func roundTripsThroughCBOR() throws {
        let set = try ValueSetEncoder().encode(Self.sample)
        let decoded = try ValueSetDecoder().decode(Ping.self, from: try ValueSet(cbor: set.cborBytes()))
        #expect(decoded == Self.sample)
    }

    @Test func dictionariesEncodeAsMaps() throws {
        let set = try ValueSetEncoder().encode(["a": 1, "b": 2])
        #expect(set == ["a": 1, "b": 2])
        #expect(try ValueSetDecoder().decode([String: Int].self, from: set) == ["a": 1, "b": 2])
    }

    @Test func refusesWhatHasNoValueSetForm() throws {
        struct Mixed: Encodable {
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: AnyKey.self)
                var list = container.nestedUnkeyedContainer(forKey: AnyKey(stringValue: "list")!)
                try list.encode(1)
                try list.encode("two")
            }
        }
        struct Huge: Encodable { var big: UInt64 = .max }
        struct Nested: Encodable { var grid: [[Int]] = [[1]] }

        #expect(throws: EncodingError.self) { try ValueSetEncoder().encode(Mixed()) }
        #expect(throws: EncodingError.self) { try ValueSetEncoder().encode(Huge()) }
        #expect(throws: EncodingError.self) { try ValueSetEncoder().encode(Nested()) }
        #expect(throws: EncodingError.self) { try ValueSetEncoder().encode(42) }
        do {
            _ = try ValueSetEncoder().encode(Mixed())
        } catch let EncodingError.invalidValue(_, context) {
            #expect(context.debugDescription == "array mixes int and string")
            #expect(context.codingPath.map(\.stringValue) == ["list"])
        }
    }

    @Test func decodingErrorsNameTheKeyAndTheKind() throws {
        let set: ValueSet = ["Type": 3, "small": 300]
        do {
            _ = try ValueSetDecoder().decode(Ping.self, from: set)
            Issue.record("decoded a Ping from \(set)")
        } catch let DecodingError.typeMismatch(_, context) {
            #expect(context.codingPath.map(\.stringValue) == ["Type"])
            #expect(context.debugDescription == "expected a string, found int 3")
        }
        struct Small: Decodable { var small: UInt8 }
        #expect(throws: DecodingError.self) { try ValueSetDecoder().decode(Small.self, from: set) }
        struct Missing: Decodable { var absent: Int }
        #expect(throws: DecodingError.self) { try ValueSetDecoder().decode(Missing.self, from: set) }
    }

    @Test func exactIntsAreAcceptedForDoubles() throws {
        struct D: Decodable { var x: Double }
        #expect(try ValueSetDecoder().decode(D.self, from: ["x": 2]).x == 2)
    }
}

struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}
