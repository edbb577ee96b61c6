import AtriumProtocol
import AtriumTLS
import AtriumTesting
import AtriumValues
import Foundation
import NIOCore
import Testing

/// The conformance vectors any client can test itself against (`conformance/` at the
/// repository's root), read with the host's own codec: every ValueSet encodes to its bytes
/// and back, every other encoding reads as its value, every refusal is refused at its path,
/// every frame reads and writes as its bytes, every pairing code is the derivation, and the
/// scripted exchange runs against a real atriumd.
struct ConformanceTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("conformance")

    static func load(_ name: String) throws -> [String: Any] {
        let data = try Data(contentsOf: folder.appendingPathComponent(name))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    static func bytes(_ hex: Any?) throws -> [UInt8] {
        let text = Array(try #require(hex as? String).utf8)
        func digit(_ character: UInt8) throws -> UInt8 {
            switch character {
            case 48...57: character - 48
            case 97...102: character - 87
            default: throw VectorError(description: "\(String(decoding: text, as: UTF8.self)) is not hex")
            }
        }
        guard text.count % 2 == 0 else { throw VectorError(description: "odd hex") }
        return try stride(from: 0, to: text.count, by: 2).map { try digit(text[$0]) << 4 | digit(text[$0 + 1]) }
    }

    /// A value from the vectors' JSON form (`{"int": "3"}`, `{"map": [[key, value], ...]}`).
    static func value(_ typed: Any) throws -> Value {
        guard let form = typed as? [String: Any], form.count == 1, let (kind, content) = form.first else {
            throw VectorError(description: "\(typed) is not a value of the vectors")
        }
        func text() throws -> String {
            guard let text = content as? String else { throw VectorError(description: "\(content) is not text") }
            return text
        }
        func parsed<T>(_ make: (String) -> T?) throws -> T {
            guard let made = make(try text()) else { throw VectorError(description: "\(kind) \(content)") }
            return made
        }
        switch kind {
        case "string": return .string(try text())
        case "int": return .int(try parsed { Int64($0) })
        case "double": return .double(try parsed { Double($0) })
        case "bool":
            guard let flag = content as? Bool else { throw VectorError(description: "\(content) is not a bool") }
            return .bool(flag)
        case "bytes": return .bytes(try bytes(content))
        case "date": return .date(Timestamp(secondsSince1970: try parsed { Double($0) }))
        case "uuid": return .uuid(try parsed { UUID(uuidString: $0) })
        case "array":
            guard let elements = content as? [Any] else { throw VectorError(description: "\(content) is no array") }
            return .array(try ValueArray(elements.map(value)))
        case "map": return .map(try valueSet(typed))
        default: throw VectorError(description: "unknown kind \(kind)")
        }
    }

    static func valueSet(_ typed: Any) throws -> ValueSet {
        let form = try #require(typed as? [String: Any])
        var set = ValueSet()
        for pair in try #require(form["map"] as? [[Any]]) {
            set[try #require(pair.first as? String)] = try value(pair[1])
        }
        return set
    }

    struct VectorError: Error, CustomStringConvertible {
        var description: String
    }

    @Test func valueSetsAreWrittenReadAndRefusedAsTheVectorsSay() throws {
        let document = try Self.load("valuesets.json")
        let encodings = try #require(document["encodings"] as? [[String: Any]])
        for vector in encodings {
            let name = vector["name"] as? String ?? "?"
            let cbor = try Self.bytes(vector["cbor"])
            #expect(hexString(try Self.valueSet(vector["value"] as Any).cborBytes()) == hexString(cbor), "\(name)")
            #expect(try ValueSet(cbor: cbor).cborBytes() == cbor, "\(name)")
        }
        for vector in try #require(document["decodings"] as? [[String: Any]]) {
            let name = vector["name"] as? String ?? "?"
            let expected = try Self.valueSet(vector["value"] as Any).cborBytes()
            #expect(try ValueSet(cbor: try Self.bytes(vector["cbor"])).cborBytes() == expected, "\(name)")
        }
        let refusals = try #require(document["refusals"] as? [[String: Any]])
        for vector in refusals {
            let name = vector["name"] as? String ?? "?"
            let path = try #require(vector["path"] as? String)
            let cbor = try Self.bytes(vector["cbor"])
            do {
                _ = try ValueSet(cbor: cbor)
                Issue.record("\(name) was not refused")
            } catch {
                #expect(error.pathDescription == path, "\(name): \(error)")
            }
        }
        #expect(encodings.count >= 15 && refusals.count >= 15)
    }

    @Test func framesAreReadAndWrittenAsTheVectorsSay() throws {
        let vectors = try #require(try Self.load("frames.json")["frames"] as? [[String: Any]])
        for vector in vectors {
            let name = vector["name"] as? String ?? "?"
            let wire = try Self.bytes(vector["bytes"])
            let body = ByteBuffer(bytes: wire.dropFirst(4))
            #expect(Array(wire.prefix(4)) == withUnsafeBytes(of: UInt32(wire.count - 4).bigEndian) { Array($0) })
            // The frame holds exactly the vector's fields.
            #expect(
                try ValueSet(cbor: Array(wire.dropFirst(4))).cborBytes()
                    == (try Self.valueSet(vector["frame"] as Any)).cborBytes(), "\(name)")
            // It reads as a frame of its type, and is written again to the same bytes.
            var again = ByteBuffer()
            if vector["sender"] as? String == "client" {
                let frame = try ClientFrame(body: body)
                if case .unknown = frame { Issue.record("\(name) read as an unknown frame") }
                frame.encodeFramed(into: &again)
            } else {
                let frame = try HostFrame(body: body)
                if case .unknown = frame { Issue.record("\(name) read as an unknown frame") }
                frame.encodeFramed(into: &again)
            }
            #expect(hexString(Array(again.readableBytesView)) == hexString(wire), "\(name)")
        }
        #expect(vectors.count >= 49)
    }

    @Test func pairingCodesAndCommitmentsAreTheVectors() throws {
        let vectors = try #require(try Self.load("pairing.json")["pairings"] as? [[String: String]])
        for vector in vectors {
            let (host, client) = (vector["host"] ?? "", vector["client"] ?? "")
            let (clientNonce, hostNonce) = (vector["clientNonce"] ?? "", vector["hostNonce"] ?? "")
            #expect(PairingCode.commitment(to: clientNonce) == vector["commitment"])
            #expect(
                PairingCode.between(host: host, client: client, clientNonce: clientNonce, hostNonce: hostNonce)
                    == vector["code"])
            #expect(PairingCode.between(host: host, client: client) == vector["codeV1"])
        }
        #expect(vectors.count >= 4)
    }

    /// Whether `value` holds what `pattern` says (`{"any": KIND}` for any value of a kind).
    static func matches(_ pattern: Any, _ value: Value) throws -> Bool {
        let form = try #require(pattern as? [String: Any])
        if let kind = form["any"] as? String {
            return switch (kind, value) {
            case ("string", .string), ("int", .int), ("map", .map), ("array", .array): true
            default: false
            }
        }
        if let pairs = form["map"] as? [[Any]] {
            guard case .map(let set) = value else { return false }
            for pair in pairs {
                guard let key = pair.first as? String, let element = set[key], try matches(pair[1], element) else {
                    return false
                }
            }
            return true
        }
        var expected = ValueSet()
        expected["v"] = try Self.value(pattern)
        var got = ValueSet()
        got["v"] = value
        return expected.cborBytes() == got.cborBytes()
    }

    @Test func theScriptedExchangeWithARealHost() async throws {
        let document = try Self.load("exchange.json")
        var manifests: [String: String] = [:]
        for name in try #require(document["manifests"] as? [String]) {
            manifests[name] = try String(
                contentsOf: Self.folder.deletingLastPathComponent().appendingPathComponent("manifests/\(name)"),
                encoding: .utf8)
        }
        let host = try await TestHost.start(manifests: manifests)
        let client = try await TestClient.connect(port: host.port)
        for (index, step) in try #require(document["steps"] as? [[String: Any]]).enumerated() {
            if let frame = step["send"] {
                try await client.sendRaw(TestClient.frame(try Self.valueSet(frame).cborBytes()))
            } else if let raw = step["sendBytes"] {
                try await client.sendRaw(try Self.bytes(raw))
            } else {
                let frame = try #require(try await client.next(), "step \(index): the host closed the connection")
                var body = ByteBuffer()
                frame.encode(into: &body)
                let received = try ValueSet(cbor: Array(body.readableBytesView))
                #expect(try Self.matches(step["expect"] as Any, .map(received)), "step \(index): \(received)")
            }
        }
        await client.close()
        #expect(await host.stop() == 0)
    }
}
