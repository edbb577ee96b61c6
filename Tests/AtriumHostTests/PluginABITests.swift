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

    func compile(_ compiler: String, _ arguments: [String]) async throws -> (Int32, String) {
        let result = try await runProgram(compiler, arguments, in: Self.root)
        return (result.status, result.output)
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
    func headerCompiles(_ compiler: String, _ arguments: [String]) async throws {
        let (status, output) = try await compile(compiler, arguments)
        #expect(status == 0, "\(compiler) \(arguments.joined(separator: " ")):\n\(output)")
    }

    static let cServiceManifest = """
        { "manifestVersion": 1, "package": "atrium.tests.c", "library": "libAtriumTestCService.so",
          "services": [{ "name": "c", "supportsRemoteSystems": true },
                       { "name": "status.-3", "supportsRemoteSystems": true },
                       { "name": "status.2147483647", "supportsRemoteSystems": true }],
          "schemes": ["atrium-ctest"] }
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

    /// ABI 1.2: a C plugin reads arrays (and maps inside them) and builds arrays and nested
    /// maps through the host's table, and each misuse gets its code.
    @Test func aCPluginReadsAndBuildsArraysAndNestedMaps() async throws {
        let host = try await startHost(manifests: ["c.json": Self.cServiceManifest])
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "c", package: "atrium.tests.c") == .success)
        let request: ValueSet = [
            "Numbers": [3, 4, 5],
            "Items": .array(ValueArray(maps: [["Name": "milk"], ["Name": "eggs"], ["Other": 1]])),
            "Items2": "not an array",
        ]
        let answer = try await client.request(channel: 1, id: 1, request)
        #expect(answer.status == .success)
        let expected: ValueSet = [
            "NumbersSum": 12, "NumbersCount": 3, "NumbersKind": .int(Int64(2)),  // ATRIUM_KIND_INT
            "LeadingZero": -5, "OutOfRange": -5,  // ATRIUM_E_NOT_FOUND
            "Names": ["milk", "eggs"], "Keys": ["Numbers", "Items", "Items2"],
            "Nested": ["List": .array(ValueArray(maps: [["A": 1], ["A": 2]])), "Empty": .array(ValueArray())],
            "MixedAppend": -6, "NestedArray": -6, "NotAnArray": -6,  // ATRIUM_E_WRONG_KIND
            "KeyOnArray": -1, "NoKeyOnMap": -1, "ArrayBytes": -1,  // ATRIUM_E_INVALID_ARGUMENT
            "NullOut": -1, "NullBuilder": -1, "NullNested": -1,
        ]
        let decoded = try answer.decoded
        for (key, value) in expected { #expect(decoded[key] == value, "\(key): \(String(describing: decoded[key]))") }
        #expect(decoded.count == expected.count, "\(decoded)")
        await client.close()
        #expect(await host.stop() == 0)
    }
}

/// Libraries that are not usable plugins are refused with the reason, and the rest load.
@Suite(.serialized)
struct PluginLoadingTests {
    /// Builds a one-file plugin whose descriptor says `major.minor` and whose create returns
    /// `createResult`.
    func buildPlugin(named name: String, major: Int, minor: Int, createResult: Int) async throws -> URL {
        try await buildPlugin(
            named: name,
            source: """
                #include "atrium_plugin.h"
                static int32_t create(const atrium_host_api *h, const char *c, void **i) { (void)h; (void)c; *i = 0; return \(createResult); }
                static const atrium_plugin p = { sizeof(atrium_plugin), \(major), \(minor), "\(name)", "0", 0, create, 0, 0, 0, 0, 0, 0 };
                const atrium_plugin *atrium_plugin_entry_v1(void) { return &p; }
                """)
    }

    /// Builds `lib<name>.so` from one C file, `source`, in a fresh folder.
    func buildPlugin(named name: String, source text: String) async throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-abi-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let source = folder.appendingPathComponent("\(name).c")
        try text.write(to: source, atomically: true, encoding: .utf8)
        let library = folder.appendingPathComponent("lib\(name).so")
        let (status, output) = try await PluginABITests().compile(
            "cc", ["-std=c11", "-shared", "-fPIC", "-ISources/CAtriumPlugin/include", "-o", library.path, source.path]
        )
        try #require(status == 0, "\(output)")
        return library
    }

    func manifest(_ package: String, _ library: URL) -> String {
        """
        { "manifestVersion": 1, "package": "\(package)", "library": "\(library.path)",
          "services": [{ "name": "s", "supportsRemoteSystems": true }] }
        """
    }

    @Test func wrongABIsAndFailingCreateAreRefusedWithReasons() async throws {
        var manifests = Fixtures.referenceManifests
        manifests["major.json"] = await manifest(
            "atrium.tests.major", try buildPlugin(named: "Major", major: 2, minor: 0, createResult: 0))
        manifests["minor.json"] = await manifest(
            "atrium.tests.minor", try buildPlugin(named: "Minor", major: 1, minor: 99, createResult: 0))
        manifests["create.json"] = await manifest(
            "atrium.tests.create", try buildPlugin(named: "Create", major: 1, minor: 0, createResult: -1))
        let host = try await startHost(manifests: manifests)
        let client = try await connectedClient(host)
        for (channel, package) in ["atrium.tests.major", "atrium.tests.minor", "atrium.tests.create"].enumerated() {
            #expect(try await client.open(channel: UInt64(channel), service: "s", package: package) == .appUnavailable)
        }
        #expect(
            try await client.open(channel: 9, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        let log = host.log
        #expect(log.contains("libMajor.so was built for plugin ABI 2.0; this host speaks ABI 1.3"))
        #expect(log.contains("libMinor.so needs plugin ABI 1.99, newer than this host's 1.3: update atriumd"))
        #expect(log.contains("the plugin's create() returned -1"))
        await client.close()
        #expect(await host.stop() == 0)
    }
}
