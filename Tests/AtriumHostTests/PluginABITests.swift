import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// The C side of the plugin ABI: the header compiles as C11 and C++17, and a C plugin reads
/// and builds messages through the host's table without parsing CBOR.
@Suite(.serialized)
struct PluginABITests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    func compile(_ compiler: String, _ arguments: [String]) throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [compiler] + arguments
        process.currentDirectoryURL = Self.root
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: output, as: UTF8.self))
    }

    @Test(arguments: [
        (
            "cc",
            [
                "-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-fsyntax-only",
                "-ISources/CAtriumPlugin/include", "Tests/Fixtures/HeaderCheck/check.c",
            ]
        ),
        (
            "c++",
            [
                "-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-fsyntax-only",
                "-ISources/CAtriumPlugin/include", "Tests/Fixtures/HeaderCheck/check.cpp",
            ]
        ),
        (
            "cc",
            [
                "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-ISources/CAtriumPlugin/include",
                "Plugins/Echo/echo.c",
            ]
        ),
    ])
    func headerCompiles(_ compiler: String, _ arguments: [String]) throws {
        let (status, output) = try compile(compiler, arguments)
        #expect(status == 0, "\(compiler) \(arguments.joined(separator: " ")):\n\(output)")
    }

    static let cServiceManifest = """
        { "manifestVersion": 1, "package": "atrium.tests.c", "library": "libAtriumTestCService.so",
          "services": [{ "name": "c", "supportsRemoteSystems": true }] }
        """

    @Test func aCPluginReadsAndBuildsEveryKind() async throws {
        let host = try await startHost(manifests: ["c.json": Self.cServiceManifest])
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "c", package: "atrium.tests.c") == .success)
        let uuid = UUID(uuidString: "F81D4FAE-7DEC-11D0-A765-00A0C91E6BF6")!
        let request: ValueSet = [
            "Int": 41, "Double": 1.25, "Bool": true, "Date": .date(Timestamp(secondsSince1970: 1_000)),
            "Text": "ünï", "Bytes": .bytes([1, 2, 3]), "Uuid": .uuid(uuid), "Map": ["Inner": [1, 2]],
        ]
        let answer = try await client.request(channel: 1, id: 1, request)
        #expect(answer.status == .success)
        let expected: ValueSet = [
            "IntPlusOne": 42, "DoubleTimesTwo": 2.5, "NotBool": false,
            "DateNextDay": .date(Timestamp(secondsSince1970: 87_400)),
            "Text": "ünï", "TextLength": 5, "Bytes": .bytes([1, 2, 3]), "Uuid": .uuid(uuid), "Map": ["Inner": [1, 2]],
            "Count": 8, "FirstKey": "Int", "KindOfText": 1, "Missing": -5, "WrongKind": -6, "BadUtf8": -1, "BadMap": -4,
        ]
        let decoded = try answer.decoded
        for (key, value) in expected { #expect(decoded[key] == value, "\(key)") }
        #expect(decoded.count == expected.count, "\(decoded)")
        await client.close()
        #expect(await host.stop() == 0)
    }
}
