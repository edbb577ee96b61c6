import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// `ValueSet.validate`, which the host runs on every message it passes on without decoding
/// it, accepts exactly what the decoder accepts and refuses the rest for the same reason, and
/// its values budget bounds the work.
struct ValidatorTests {
    /// Decoding and validating `bytes` agree: both accept, or both refuse with one error.
    func expectAgreement(_ bytes: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
        let decoded = errorOf { _ = try ValueSet(cbor: bytes) }
        let validated = errorOf { try bytes.withUnsafeBytes { raw in try ValueSet.validate(cbor: raw) } }
        #expect(decoded?.description == validated?.description, "\(hex(bytes))", sourceLocation: sourceLocation)
        #expect(decoded?.code == validated?.code, "\(hex(bytes))", sourceLocation: sourceLocation)
    }

    /// The error `body` throws, or nil when it succeeds.
    func errorOf(_ body: () throws -> Void) -> ValueSetError? {
        do {
            try body()
            return nil
        } catch {
            return error as? ValueSetError
        }
    }

    /// `item` as the value of key "v" of a message.
    func message(holding item: [UInt8]) -> [UInt8] { [0xa1, 0x61, 0x76] + item }

    @Test func everyTestVectorIsJudgedAlike() throws {
        for example in try AppendixATests.examples() {
            expectAgreement(message(holding: bytes(hex: example.hex)))
        }
        for hexString in try NotWellFormedTests.cases() {
            expectAgreement(bytes(hex: hexString))
            expectAgreement(message(holding: bytes(hex: hexString)))
        }
    }

    @Test func generatedMessagesAndTheirMutationsAreJudgedAlike() {
        var generator = ValueGenerator(seed: 0x5EED)
        var random = SystemRandomNumberGenerator()
        for _ in 0..<1_000 {
            let encoded = generator.valueSet().cborBytes()
            expectAgreement(encoded)
            var mutated = encoded
            for _ in 0..<3 {
                mutated[Int.random(in: 0..<mutated.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
            }
            expectAgreement(mutated)
            expectAgreement(Array(encoded.dropLast()))
        }
    }

    @Test func keysEqualUnderCanonicalEquivalenceAreDuplicates() {
        // U+212A KELVIN SIGN is canonically "K"; "é" precomposed and decomposed are one key.
        for (a, b) in [("K", "\u{212A}"), ("\u{E9}", "e\u{301}")] {
            let encoded = [0xa2] + text(a) + [0x01] + text(b) + [0x02]
            expectAgreement(encoded)
            #expect(decodingError { _ = try ValueSet(cbor: encoded) }?.reason.hasPrefix("duplicate key") == true)
        }
        // Many ASCII keys go through the hashed path: the duplicate at the end is found.
        var many: [UInt8] = [0xb8, 41]
        for index in 0..<40 { many += text("key\(index)") + [0x00] }
        many += text("key7") + [0x00]
        expectAgreement(many)
        #expect(decodingError { _ = try ValueSet(cbor: many) }?.reason == #"duplicate key "key7""#)
    }

    /// Text is checked eight ASCII bytes at a time: a bad (or good) sequence anywhere, on
    /// either side of every eight-byte boundary, is judged as the decoder judges it.
    @Test func textIsJudgedAlikeWhereverItsNonASCIIBytesFall() {
        let sequences: [[UInt8]] = [
            [0xff], [0x80], [0xc3, 0xa9], [0xc3], [0xe2, 0x82, 0xac], [0xe2, 0x82], [0xed, 0xa0, 0x80],
            [0xc0, 0xaf], [0xf0, 0x9f, 0x98, 0x80], [0xf4, 0x90, 0x80, 0x80],
        ]
        for sequence in sequences {
            let valid = String(validating: sequence, as: UTF8.self) != nil
            for before in 0..<18 {
                for after in [0, 1, 7, 8, 9] {
                    let utf8 =
                        Array(repeating: UInt8(ascii: "a"), count: before) + sequence
                        + Array(repeating: UInt8(ascii: "b"), count: after)
                    let encoded = message(holding: [0x78, UInt8(utf8.count)] + utf8)
                    expectAgreement(encoded)
                    let refused = errorOf { try encoded.withUnsafeBytes { raw in try ValueSet.validate(cbor: raw) } }
                    #expect((refused == nil) == valid, "\(hex(encoded))")
                }
            }
        }
    }

    func text(_ string: String) -> [UInt8] {
        let utf8 = Array(string.utf8)
        return [0x60 | UInt8(utf8.count)] + utf8
    }

    @Test func theValuesBudgetCountsEveryValueAndStopsAtIt() throws {
        let set: ValueSet = ["a": [1, 2, 3], "m": ["x": true]]  // the map, a, 3 ints, m, x: 7 values
        let encoded = set.cborBytes()
        try encoded.withUnsafeBytes { raw in try ValueSet.validate(cbor: raw, maxValues: 7) }
        let error = decodingError {
            try encoded.withUnsafeBytes { raw in try ValueSet.validate(cbor: raw, maxValues: 6) }
        }
        #expect(error?.code == .tooLarge)
        #expect(error?.description == "message.m.x: the message holds more than 6 values, the limit")
    }

    @Test func invalidUTF8IsRefusedAsTheDecoderRefusesIt() {
        for bad in [[0xc3, 0x28], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xff]] as [[UInt8]]
        {
            expectAgreement(message(holding: [0x60 | UInt8(bad.count)] + bad))
            expectAgreement([0xa1, 0x60 | UInt8(bad.count)] + bad + [0x01])
        }
    }
}
