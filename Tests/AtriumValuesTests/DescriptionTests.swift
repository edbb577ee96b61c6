import AtriumValues
import Foundation
import Testing

struct DescriptionTests {
    @Test func readsLikeDiagnosticNotation() {
        let set: ValueSet = [
            "Type": "ping", "Count": 3, "Ratio": 1.0, "Ok": true,
            "When": .date(Timestamp(secondsSince1970: 1_363_896_240.5)),
            "Id": .uuid(UUID(uuidString: "F81D4FAE-7DEC-11D0-A765-00A0C91E6BF6")!),
            "Data": .bytes([1, 2]), "List": [1, 2], "Inner": ["q": "\"x\""], "Odd": .double(.nan),
        ]
        #expect(
            set.description
                == #"{"Type": "ping", "Count": 3, "Ratio": 1.0, "Ok": true, "When": 1(1363896240.5), "#
                + #""Id": 37(h'f81d4fae7dec11d0a76500a0c91e6bf6'), "Data": h'0102', "List": [1, 2], "#
                + #""Inner": {"q": "\"x\""}, "Odd": NaN}"#
        )
        #expect(Value.date(Timestamp(secondsSince1970: 1_363_896_240)).description == "1(1363896240)")
        #expect(Value.double(-.infinity).description == "-Infinity")
    }

    @Test func equalityIgnoresKeyOrderButEncodingKeepsIt() {
        let a: ValueSet = ["x": 1, "y": 2]
        let b: ValueSet = ["y": 2, "x": 1]
        #expect(a == b)
        #expect(a.hashValue == b.hashValue)
        #expect(a.cborBytes() != b.cborBytes())
        #expect(Set([Value.double(.nan), .double(.nan)]).count == 1)
    }

    @Test func accessorsReturnNilForOtherKinds() {
        let value: Value = 3
        #expect(value.int == 3 && value.number == 3)
        #expect(value.string == nil && value.double == nil && value.map == nil && value.array == nil)
        var set: ValueSet = ["a": 1]
        set["a"] = nil
        #expect(set.isEmpty)
    }
}

/// The README's first example, kept compiling and true.
struct ReadmeExampleTests {
    @Test func firstTaste() throws {
        var message: ValueSet = ["Type": "ping", "CreationDate": .date(.now), "TargetId": "phone"]
        message["Count"] = 3
        let bytes = message.cborBytes()
        let back = try ValueSet(cbor: bytes)
        #expect(back == message)
        struct Ping: Codable { var TargetId: String; var Count: Int }
        let ping = try ValueSetDecoder().decode(Ping.self, from: back)
        #expect(ping.TargetId == "phone" && ping.Count == 3)
    }
}
