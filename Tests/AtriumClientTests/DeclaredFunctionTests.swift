import AtriumClient
import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// C functions exposed by a manifest alone, called through libffi by a real atriumd.
@Suite(.serialized)
struct DeclaredFunctionTests {
    static let typesManifest = """
        {
          "manifestVersion": 1, "package": "atrium.tests.ffi", "library": "libffitypes.so",
          "services": [{ "name": "ffi", "supportsRemoteSystems": true }],
          "functions": [
            { "command": "i8", "symbol": "ffitypes_i8", "params": [{ "name": "v", "type": "int8" }], "returns": "int8" },
            { "command": "i16", "symbol": "ffitypes_i16", "params": [{ "name": "v", "type": "int16" }], "returns": "int16" },
            { "command": "i32", "symbol": "ffitypes_i32", "params": [{ "name": "v", "type": "int32" }], "returns": "int32" },
            { "command": "i64", "symbol": "ffitypes_i64", "params": [{ "name": "v", "type": "int64" }], "returns": "int64" },
            { "command": "u8", "symbol": "ffitypes_u8", "params": [{ "name": "v", "type": "uint8" }], "returns": "uint8" },
            { "command": "u16", "symbol": "ffitypes_u16", "params": [{ "name": "v", "type": "uint16" }], "returns": "uint16" },
            { "command": "u32", "symbol": "ffitypes_u32", "params": [{ "name": "v", "type": "uint32" }], "returns": "uint32" },
            { "command": "u64", "symbol": "ffitypes_u64", "params": [{ "name": "v", "type": "uint64" }], "returns": "uint64" },
            { "command": "float", "symbol": "ffitypes_float", "params": [{ "name": "v", "type": "float" }], "returns": "float" },
            { "command": "double", "symbol": "ffitypes_double", "params": [{ "name": "v", "type": "double" }], "returns": "double" },
            { "command": "not", "symbol": "ffitypes_not", "params": [{ "name": "v", "type": "bool" }], "returns": "bool" },
            { "command": "mix", "symbol": "ffitypes_mix", "params": [
                { "name": "a", "type": "int8" }, { "name": "b", "type": "uint16" }, { "name": "c", "type": "float" },
                { "name": "d", "type": "double" }, { "name": "e", "type": "bool" }, { "name": "f", "type": "int64" }],
              "returns": "double" },
            { "command": "touch", "symbol": "ffitypes_touch" },
            { "command": "calls", "symbol": "ffitypes_calls", "returns": "int32" },
            { "command": "strlen", "symbol": "ffitypes_strlen", "params": [{ "name": "text", "type": "string" }], "returns": "uint64" },
            { "command": "static", "symbol": "ffitypes_static", "params": [{ "name": "null", "type": "bool" }], "returns": "string" },
            { "command": "sum", "symbol": "ffitypes_sum", "params": [
                { "name": "bytes", "type": "bytes" }, { "name": "length", "type": "uint64", "lengthOf": "bytes" }], "returns": "uint64" },
            { "command": "copy", "symbol": "ffitypes_copy", "params": [{ "name": "text", "type": "string" }],
              "returns": { "type": "string", "free": "ffitypes_release" } },
            { "command": "live", "symbol": "ffitypes_live", "returns": "int32" },
            { "command": "big", "symbol": "ffitypes_big", "params": [{ "name": "size", "type": "uint32" }],
              "returns": { "type": "string", "free": "free" } }
          ]
        }
        """

    static var manifests: [String: String] {
        ClientTests.manifests.merging(["ffi.json": typesManifest]) { $1 }
    }

    func service(_ host: TestHost, _ package: String = "atrium.tests.ffi", _ name: String = "ffi") async throws
        -> AppServiceConnection
    {
        let connection = try await AtriumConnection.connect(to: AtriumEndpoint("127.0.0.1:\(host.port)")!)
        let service = AppServiceConnection(appServiceName: name, packageId: package, connection: connection)
        try #require(try await service.openRemote() == .success)
        return service
    }

    @Test func theMathExampleFromTheDocs() async throws {
        let host = try await TestHost.start(manifests: Self.manifests)
        let math = try await service(host, "atrium.examples.mathlib", "atrium.math")
        #expect(try await math.sendMessage(["Command": "add", "a": 2, "b": 40]).message == ["Result": 42])
        let checksum = try await math.sendMessage(["Command": "checksum", "data": .bytes(Array("Wikipedia".utf8))])
        #expect(checksum.message == ["Result": 0x11E6_0398], "Adler-32 of Wikipedia")
        #expect(
            try await math.sendMessage(["Command": "greet", "name": "Wörld 水"]).message == ["Result": "Hello, Wörld 水!"]
        )
        await math.connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func everyTypeAndBothEdgesOfEachInteger() async throws {
        let host = try await TestHost.start(manifests: Self.manifests)
        let ffi = try await service(host)
        let edges: [(String, Int64, Int64)] = [
            ("i8", Int64(Int8.min), Int64(Int8.max)), ("i16", Int64(Int16.min), Int64(Int16.max)),
            ("i32", Int64(Int32.min), Int64(Int32.max)), ("i64", .min, .max),
            ("u8", 0, Int64(UInt8.max)), ("u16", 0, Int64(UInt16.max)), ("u32", 0, Int64(UInt32.max)), ("u64", 0, .max),
        ]
        for (command, low, high) in edges {
            for value in [low, high] {
                let answer = try await ffi.sendMessage(["Command": .string(command), "v": .int(value)])
                #expect(answer.status == .success && answer.message == ["Result": .int(value)], "\(command) \(value)")
            }
            if low > Int64.min {
                let below = try await ffi.sendMessage(["Command": .string(command), "v": .int(low - 1)])
                #expect(
                    below.status == .failure
                        && below.error?.hasPrefix("argument \"v\": \(low - 1) does not fit") == true, "\(command)")
            }
            if high < Int64.max {
                let above = try await ffi.sendMessage(["Command": .string(command), "v": .int(high + 1)])
                #expect(above.status == .failure, "\(command) above its range")
            }
        }
        #expect(try await ffi.sendMessage(["Command": "float", "v": 1.5]).message == ["Result": 1.5])
        #expect(
            try await ffi.sendMessage(["Command": "float", "v": 3]).message == ["Result": 3.0], "exact ints for float")
        #expect(try await ffi.sendMessage(["Command": "double", "v": -0.25]).message == ["Result": -0.25])
        #expect(
            try await ffi.sendMessage(["Command": "double", "v": .int(1 << 53)]).message == [
                "Result": .double(9_007_199_254_740_992)
            ])
        let inexact = try await ffi.sendMessage(["Command": "double", "v": .int((1 << 53) + 1)])
        #expect(
            inexact.status == .failure && inexact.error == "argument \"v\": 9007199254740993 has no exact double value")
        #expect(try await ffi.sendMessage(["Command": "not", "v": true]).message == ["Result": false])
        let mixed = try await ffi.sendMessage([
            "Command": "mix", "a": -1, "b": 2, "c": 0.5, "d": 0.25, "e": true, "f": 10,
        ])
        #expect(mixed.message == ["Result": 1011.75], "arguments arrive in order")
        #expect(try await ffi.sendMessage(["Command": "touch"]).message == [:], "void: no Result")
        #expect(try await ffi.sendMessage(["Command": "calls"]).message == ["Result": 1])
        #expect(
            try await ffi.sendMessage(["Command": "strlen", "text": "ünï水"]).message == ["Result": 8], "UTF-8 bytes")
        #expect(
            try await ffi.sendMessage(["Command": "static", "null": false]).message == [
                "Result": "kept by the library: ünï"
            ])
        #expect(try await ffi.sendMessage(["Command": "static", "null": true]).message == [:], "NULL: no Result")
        #expect(
            try await ffi.sendMessage(["Command": "sum", "bytes": .bytes([1, 2, 250])]).message == ["Result": 253])
        #expect(try await ffi.sendMessage(["Command": "sum", "bytes": .bytes([])]).message == ["Result": 0])
        await ffi.connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func rejectionsNameTheParameterAndCallNothing() async throws {
        let host = try await TestHost.start(manifests: Self.manifests)
        let ffi = try await service(host)
        let cases: [(ValueSet, String)] = [
            (
                ["v": 1],
                "the message needs a Command string, one of: i8, i16, i32, i64, u8, u16, u32, u64, float, double, not, mix, touch, calls, strlen, static, sum, copy, live, big"
            ),
            (
                ["Command": "nope"],
                #"unknown Command "nope"; this service has: i8, i16, i32, i64, u8, u16, u32, u64, float, double, not, mix, touch, calls, strlen, static, sum, copy, live, big"#
            ),
            (["Command": "mix", "a": 1, "b": 2, "c": 0.5, "d": 0.25, "e": true], #"missing argument "f" (int64)"#),
            (["Command": "i32", "v": "7"], #"argument "v" must be an int, not string "7""#),
            (["Command": "i32", "v": 7.0], #"argument "v" must be an int, not double 7.0"#),
            (["Command": "not", "v": 1], #"argument "v" must be a bool, not int 1"#),
            (["Command": "strlen", "text": .bytes([65])], #"argument "text" must be a string, not bytes h'41'"#),
            (
                ["Command": "strlen", "text": "a\u{0}b"],
                #"argument "text" holds a NUL character, which a C string cannot carry"#
            ),
            (["Command": "sum", "bytes": "text"], #"argument "bytes" must be bytes, not string "text""#),
            (["Command": "u64", "v": -1], #"argument "v": -1 does not fit uint64 (0...18446744073709551615)"#),
        ]
        for (message, reason) in cases {
            let answer = try await ffi.sendMessage(message)
            #expect(answer.status == .failure, "\(message)")
            #expect(answer.error == reason)
        }
        #expect(try await ffi.sendMessage(["Command": "calls"]).message == ["Result": 0], "nothing was called")
        await ffi.connection.close()
        #expect(await host.stop() == 0)
    }

    @Test(
        .disabled(
            if: TestEnvironment.addressSanitizer,
            "AddressSanitizer keeps freed memory in quarantine, so resident memory says nothing of what is freed"))
    func returnedStringsAreFreedAsDeclared() async throws {
        let host = try await TestHost.start(manifests: Self.manifests)
        let ffi = try await service(host)
        for index in 0..<200 {
            let answer = try await ffi.sendMessage(["Command": "copy", "text": .string("copy \(index) ü")])
            #expect(answer.message == ["Result": .string("copy \(index) ü")])
        }
        #expect(
            try await ffi.sendMessage(["Command": "live"]).message == ["Result": 0],
            "the library's own free ran for each")

        func rss() throws -> Int {
            let status = try String(contentsOfFile: "/proc/\(host.process.processIdentifier)/status", encoding: .utf8)
            let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }!
            return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1])!
        }
        for _ in 0..<20 { _ = try await ffi.sendMessage(["Command": "big", "size": 65536]) }
        let before = try rss()
        for _ in 0..<300 { _ = try await ffi.sendMessage(["Command": "big", "size": 65536]) }
        let growth = try rss() - before
        #expect(
            growth < 8 * 1024,
            "300 results of 64 KiB freed with free(): RSS grew \(growth) KiB (unfreed, it would be about 19 MiB)")
        await ffi.connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func manifestsWithMissingSymbolsAreRefusedAtLoad() async throws {
        let broken = """
            { "manifestVersion": 1, "package": "atrium.tests.ffi.broken", "library": "libffitypes.so",
              "services": [{ "name": "ffi", "supportsRemoteSystems": true }],
              "functions": [{ "command": "gone", "symbol": "ffitypes_does_not_exist", "returns": "int32" }] }
            """
        let noFree = """
            { "manifestVersion": 1, "package": "atrium.tests.ffi.nofree", "library": "libffitypes.so",
              "services": [{ "name": "ffi", "supportsRemoteSystems": true }],
              "functions": [{ "command": "copy", "symbol": "ffitypes_copy", "params": [{"name": "t", "type": "string"}],
                              "returns": { "type": "string", "free": "no_such_free" } }] }
            """
        let zlib = """
            { "manifestVersion": 1, "package": "atrium.tests.zlib", "library": "libz.so.1",
              "services": [{ "name": "z", "supportsRemoteSystems": true }],
              "functions": [{ "command": "version", "symbol": "zlibVersion", "returns": "string" }] }
            """
        let host = try await TestHost.start(manifests: [
            "broken.json": broken, "nofree.json": noFree, "zlib.json": zlib,
        ])
        #expect(await host.waitForLog(#"function "gone": the library has no symbol ffitypes_does_not_exist"#))
        #expect(await host.waitForLog(#"function "copy": the library has no symbol no_such_free to free results with"#))
        let connection = try await AtriumConnection.connect(to: AtriumEndpoint("127.0.0.1:\(host.port)")!)
        let refused = AppServiceConnection(
            appServiceName: "ffi", packageId: "atrium.tests.ffi.broken", connection: connection)
        #expect(try await refused.openRemote() == .appUnavailable)
        let z = AppServiceConnection(appServiceName: "z", packageId: "atrium.tests.zlib", connection: connection)
        #expect(try await z.openRemote() == .success, "a bare library name goes to the dynamic loader's search")
        let version = try await z.sendMessage(["Command": "version"])
        #expect(version.message["Result"]?.string?.hasPrefix("1.") == true)
        await connection.close()
        #expect(await host.stop() == 0)
    }
}
