import AtriumValues
import Foundation
import Testing

/// The bytes that `hex` spells; traps on bad input (test data is fixed).
func bytes(hex: String) -> [UInt8] {
    let digits = Array(hex.utf8)
    precondition(digits.count % 2 == 0, "odd-length hex \(hex)")
    return stride(from: 0, to: digits.count, by: 2).map { i in
        UInt8(String(decoding: digits[i..<i + 2], as: UTF8.self), radix: 16)!
    }
}

func hex(_ bytes: [UInt8]) -> String {
    bytes.map { String(format: "%02x", $0) }.joined()
}

/// A file in `TestVectors/`, beside this source file.
func testVector(_ name: String) throws -> Data {
    let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("TestVectors").appendingPathComponent(name)
    return try Data(contentsOf: url)
}

/// The repository's root folder.
let repositoryRoot = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// The error that `body` throws, recorded as a test failure when it throws none.
func decodingError(_ body: () throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) -> ValueSetError? {
    do {
        try body()
        Issue.record("expected a ValueSetError, got success", sourceLocation: sourceLocation)
        return nil
    } catch let error as ValueSetError {
        return error
    } catch {
        Issue.record("expected a ValueSetError, got \(error)", sourceLocation: sourceLocation)
        return nil
    }
}
