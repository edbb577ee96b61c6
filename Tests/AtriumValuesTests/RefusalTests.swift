import AtriumValues
import Testing

/// Every way a message can fail to be a ValueSet is refused with a code, a path and a reason.
struct RefusalTests {
    func refusal(_ hexString: String, sourceLocation: SourceLocation = #_sourceLocation) -> ValueSetError? {
        decodingError({ _ = try ValueSet(cbor: bytes(hex: hexString)) }, sourceLocation: sourceLocation)
    }

    @Test func mixedArrayNamesItsPathAndIndex() throws {
        // {"items": [1, 2, 3, "four"]}
        let error = try #require(refusal("a1656974656d7384010203646661757200"))
        #expect(error.description == "message.items[3]: array mixes int and string")
        #expect(error.code == .notAValueSet)
    }

    @Test func keysNeedingQuotesAreQuotedInPaths() throws {
        // {"a key": {"x": null}}
        let error = try #require(refusal("a1656120" + "6b6579a16178f6"))
        #expect(error.description == #"message["a key"].x: null is not a ValueSet kind"#)
    }

    @Test func duplicateKeys() throws {
        let error = try #require(refusal("a2616101616102"))  // {"a": 1, "a": 2}
        #expect(error.description == #"message: duplicate key "a""#)
        // Also in large maps that use the hash index.
        var input: [UInt8] = [0xb8, 40]
        for i in 0..<39 { input += [0x63, 0x6b, 0x30 + UInt8(i / 10), 0x30 + UInt8(i % 10), 0x00] }
        input += [0x63, 0x6b, 0x30, 0x35, 0x00]  // "k05" again
        let large = try #require(decodingError { _ = try ValueSet(cbor: input) })
        #expect(large.reason == #"duplicate key "k05""#)
    }

    @Test func nonTextKeys() throws {
        #expect(refusal("a10102")?.reason == "map keys must be text, but key 1 is an integer")
        #expect(refusal("a1416b02")?.reason == "map keys must be text, but key 1 is a byte string")
    }

    @Test func integersOutsideInt64() throws {
        #expect(
            refusal("a161781b8000000000000000")?.description
                == "message.x: integer 9223372036854775808 is outside the Int64 range")
        #expect(
            refusal("a161783b8000000000000000")?.reason == "integer -9223372036854775808-1 is outside the Int64 range")
    }

    @Test func tagsOtherThanDateAndUUID() throws {
        #expect(refusal("a16178c0613f")?.reason == "tag 0 is not a ValueSet kind (only tag 1, date, and tag 37, uuid)")
        #expect(refusal("a16178c1613f")?.reason == "tag 1 (date) must hold an integer or a float, not a text string")
        #expect(refusal("a16178d825420102")?.reason == "tag 37 (uuid) must hold 16 bytes, not 2")
        #expect(refusal("a16178d8250a")?.reason == "tag 37 (uuid) must hold a byte string, not an integer")
    }

    @Test func invalidUTF8() throws {
        #expect(refusal("a1617862c328")?.description == "message.x: text string is not valid UTF-8")
        #expect(refusal("a162c32801")?.reason == "text string is not valid UTF-8", "in a key too")
    }

    @Test func arraysOfArraysAndNull() throws {
        #expect(refusal("a161788180")?.description == "message.x[0]: an array may not hold arrays")
        #expect(refusal("a16178f7")?.reason == "undefined is not a ValueSet kind")
    }

    @Test func topLevelMustBeAMap() throws {
        #expect(refusal("83010203")?.description == "message: a ValueSet must be a map, not an array")
        #expect(refusal("f6")?.reason == "a ValueSet must be a map, not null")
    }

    @Test func truncatedAndTrailing() throws {
        #expect(refusal("a2616101")?.code == .notWellFormed)
        #expect(refusal("a1617865616263")?.reason == "unexpected end of input: 5 more bytes needed, 3 left")
        #expect(refusal("a0a0")?.reason == "1 bytes after the end of the value")
        #expect(refusal("")?.code == .notWellFormed)
    }

    @Test func impossibleCountsAreRefusedWithoutAllocating() throws {
        // An array that claims 2^63 elements in a 12-byte message.
        #expect(refusal("a161789b7fffffffffffffff00")?.code == .notWellFormed)
        #expect(refusal("a161785b7fffffffffffffff00")?.code == .notWellFormed)
        #expect(refusal("bb7fffffffffffffff")?.code == .notWellFormed)
    }

    @Test func byteBudgetIsEnforcedWhileDecoding() throws {
        let message: ValueSet = ["payload": .bytes(Array(repeating: 7, count: 1_000))]
        let encoded = message.cborBytes()
        let error = try #require(decodingError { _ = try ValueSet(cbor: encoded, limits: .init(maxBytes: 100)) })
        #expect(error.code == .tooLarge)
        #expect(error.offset == 12, "stopped after the string's head, before reading its bytes")
        #expect(try ValueSet(cbor: encoded, limits: .init(maxBytes: encoded.count)) == message)
    }

    @Test func deepNestingOfHostileInputIsRefusedWithoutRecursingFar() throws {
        // 100,000 nested arrays: refused at level 33, long before the stack would matter.
        let input: [UInt8] = [0xa1, 0x61, 0x78] + Array(repeating: UInt8(0x81), count: 100_000) + [0x00]
        let error = try #require(decodingError { _ = try ValueSet(cbor: input) })
        #expect(error.code == .notAValueSet || error.code == .nestingTooDeep)
        let maps: [UInt8] = Array(repeating: [UInt8(0xa1), 0x61, 0x78], count: 100_000).flatMap { $0 } + [0x00]
        #expect(decodingError { _ = try ValueSet(cbor: maps) }?.code == .nestingTooDeep)
    }

    @Test func runtimeArraysMustBeHomogeneous() throws {
        let error = try #require(decodingError { _ = try ValueArray([1, 2, "x"]) })
        #expect(error.description == "message[2]: array mixes int and string")
        #expect(decodingError { _ = try ValueArray([[1], [2]]) }?.reason == "an array may not hold arrays")
    }
}
