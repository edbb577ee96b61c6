import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// Our codec against Python's cbor2, an independent implementation: what we write, cbor2
/// reads as the same values; what cbor2 writes (dates as tag 1, UUIDs as tag 37, bytes,
/// nested maps, float64 and canonical floats), we read as the same values.
/// Needs `python3` with `cbor2` (`pip install cbor2`), which `.ci/run` installs.
struct CrossCheckTests {
    static let script = repositoryRoot.appendingPathComponent("Scripts/cbor2_crosscheck.py").path

    /// Runs the cross-check script and returns its standard output; fails on a non-zero exit.
    /// It waits on a thread of its own (not one of the few the tests' tasks share), and its
    /// errors go to a file, so that neither output can fill its pipe while the other is read.
    func runScript(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) async throws -> String {
        let errorsFile = FileManager.default.temporaryDirectory.appendingPathComponent(
            "atrium-crosscheck-\(UUID()).err")
        defer { try? FileManager.default.removeItem(at: errorsFile) }
        let (status, output) = try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(
                    with: Result {
                        let process = Process()
                        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
                        process.arguments = ["python3", Self.script] + arguments
                        let output = try PrivatePipe()
                        process.standardOutput = output.writing
                        _ = FileManager.default.createFile(atPath: errorsFile.path, contents: nil)
                        process.standardError = try FileHandle(forWritingTo: errorsFile)
                        try process.run()
                        output.childStarted()
                        let data = output.reading.readDataToEndOfFile()
                        process.waitUntilExit()
                        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
                    })
            }
        }
        let errors = (try? String(contentsOf: errorsFile, encoding: .utf8)) ?? ""
        try #require(
            status == 0,
            "python3 \(Self.script) \(arguments.joined(separator: " ")) exited \(status): \(errors)",
            sourceLocation: sourceLocation
        )
        return output
    }

    @Test func cbor2ReadsWhatWeWrite() async throws {
        var generator = ValueGenerator(seed: 0xC0_FF_EE, maxDepth: 5)
        var lines: [String] = []
        for _ in 0..<500 {
            let set = generator.valueSet()
            let line: [String: Any] = ["hex": hex(set.cborBytes()), "expect": Tagged.encode(.map(set))]
            lines.append(String(decoding: try JSONSerialization.data(withJSONObject: line), as: UTF8.self))
        }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-crosscheck-\(UUID()).jsonl")
        try lines.joined(separator: "\n").write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let output = try await runScript(["check", file.path])
        #expect(output.trimmingCharacters(in: .whitespacesAndNewlines) == "500 passed, 0 failed")
    }

    @Test func weReadWhatCbor2Writes() async throws {
        let output = try await runScript(["generate", "2026", "500"])
        let lines = output.split(separator: "\n")
        #expect(lines.count == 500)
        var kinds = Set<String>()
        for line in lines {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as! [String: Any]
            let encoded = bytes(hex: object["hex"] as! String)
            let expected = try Tagged.decode(object["expect"]!)
            let decoded = try ValueSet(cbor: encoded)
            #expect(Value.map(decoded) == expected, "\(object["hex"]!)")
            Tagged.collectKinds(expected, into: &kinds)
        }
        // The generated values cover every kind.
        #expect(kinds == Set(Value.Kind.allCases.map(\.rawValue)))
    }
}

/// The tagged JSON form of values that the cross-check script speaks (see its docstring).
enum Tagged {
    static func bitsHex(_ value: Double) -> String { String(format: "%016llx", value.bitPattern) }

    static func encode(_ value: Value) -> [String: Any] {
        switch value {
        case .string(let s): ["s": s]
        case .int(let i): ["i": String(i)]
        case .double(let d): ["f": bitsHex(d)]
        case .bool(let b): ["b": b]
        case .date(let t): ["d": bitsHex(t.secondsSince1970)]
        case .uuid(let u): ["u": u.uuidString.replacingOccurrences(of: "-", with: "").lowercased()]
        case .bytes(let x): ["x": hex(x)]
        case .array(let a): ["a": a.map(encode)]
        case .map(let m): ["m": m.map { [$0.key, encode($0.value)] }]
        }
    }

    struct Malformed: Error { let what: String }

    static func double(_ hexBits: Any) throws -> Double {
        guard let text = hexBits as? String, let bits = UInt64(text, radix: 16) else {
            throw Malformed(what: "\(hexBits)")
        }
        return Double(bitPattern: bits)
    }

    static func decode(_ object: Any) throws -> Value {
        guard let tagged = object as? [String: Any], let (kind, payload) = tagged.first else {
            throw Malformed(what: "\(object)")
        }
        switch kind {
        case "s": return .string(payload as! String)
        case "i": return .int(Int64(payload as! String)!)
        case "f": return .double(try double(payload))
        case "b": return .bool(payload as! Bool)
        case "d": return .date(Timestamp(secondsSince1970: try double(payload)))
        case "u":
            let raw = bytes(hex: payload as! String)
            return .uuid(UUID(uuid: raw.withUnsafeBytes { $0.load(as: uuid_t.self) }))
        case "x": return .bytes(bytes(hex: payload as! String))
        case "a": return .array(try ValueArray((payload as! [Any]).map(decode)))
        case "m":
            var set = ValueSet()
            for pair in payload as! [[Any]] {
                set[pair[0] as! String] = try decode(pair[1])
            }
            return .map(set)
        default: throw Malformed(what: "\(object)")
        }
    }

    static func collectKinds(_ value: Value, into kinds: inout Set<String>) {
        kinds.insert(value.kind.rawValue)
        switch value {
        case .array(let a): for element in a { collectKinds(element, into: &kinds) }
        case .map(let m): for (_, v) in m { collectKinds(v, into: &kinds) }
        default: break
        }
    }
}
