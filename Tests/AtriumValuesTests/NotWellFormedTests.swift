import Foundation
import Testing

@_spi(CBOR) @testable import AtriumValues

/// The 568 byte sequences of the CBOR test vectors that are not well-formed: every one is
/// refused with an error, by the value decoder and by the well-formedness check that frames
/// go through, and none crashes.
struct NotWellFormedTests {
    static func cases() throws -> [String] {
        let list =
            try JSONSerialization.jsonObject(with: try testVector("cbor-not-well-formed.json")) as! [[String: Any]]
        return list.map { $0["hex"] as! String }
    }

    @Test func thereAre568() throws {
        #expect(try Self.cases().count == 568)
    }

    @Test func valueDecoderRefusesEveryOne() throws {
        var codes: [ValueSetError.Code: Int] = [:]
        for hexString in try Self.cases() {
            let input = bytes(hex: hexString)
            guard let error = decodingError({ _ = try Value(cbor: input) }) else {
                Issue.record("accepted \(hexString)")
                continue
            }
            codes[error.code, default: 0] += 1
            #expect(!error.reason.isEmpty)
        }
        // Most are caught as malformed; a few start with a well-formed item of a kind that
        // ValueSets refuse (a tag, null) and are refused for that before the bad bytes.
        #expect(codes.values.reduce(0, +) == 568)
        #expect(codes[.notWellFormed, default: 0] > 400)
    }

    @Test func wellFormednessCheckRefusesEveryOneAsMalformed() throws {
        for hexString in try Self.cases() {
            let input = bytes(hex: hexString)
            let error = input.withUnsafeBytes { raw -> ValueSetError? in
                var reader = CBORReader(raw)
                do throws(ValueSetError) {
                    try reader.skipItem(maxDepth: 512)
                    return reader.isAtEnd ? nil : reader.error(.notWellFormed, "trailing bytes")
                } catch {
                    return error
                }
            }
            #expect(error?.code == .notWellFormed, "\(hexString): \(String(describing: error))")
        }
    }

    @Test func valueSetDecoderRefusesEveryOneWrappedInAMap() throws {
        // The same bytes as the value of a key: the error names the key.
        for hexString in try Self.cases() {
            let input = [0xa1, 0x61, 0x6b] + bytes(hex: hexString)  // {"k": <bad>}
            guard let error = decodingError({ _ = try ValueSet(cbor: input) }) else { continue }
            let insideTheKey = error.path.first == .key("k")
            let afterTheValue = error.path.isEmpty && error.reason.contains("after the end of the value")
            #expect(insideTheKey || afterTheValue, "\(hexString): \(error)")
        }
    }
}
