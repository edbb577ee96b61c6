import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// Inputs that once made the whole host abort: statuses out of range from a client or a
/// plugin, strings with NULs read through the C table, a plugin launching its own scheme from
/// inside its callback, and a descriptor smaller than the header's. Each test asserts what
/// the client gets, and that the host is still alive and serving afterwards.
@Suite(.serialized)
struct HostileCrashTests {
    /// The host still answers a ping and an echo on a fresh connection.
    func expectServing(_ host: TestHost, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        #expect(host.isRunning, "the host is alive", sourceLocation: sourceLocation)
        let client = try await connectedClient(host, clientId: "bystander")
        try await client.send(.ping(id: 77))
        #expect(try await client.next() == .pong(id: 77), sourceLocation: sourceLocation)
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success,
            sourceLocation: sourceLocation)
        let echo = try await client.request(channel: 1, id: 1, ["Still": "here"])
        #expect(try echo.decoded == ["Still": "here"], sourceLocation: sourceLocation)
        await client.close()
    }

    @Test func aClientAnsweringAServiceWithAHugeStatusReachesThePluginAsUnknown() async throws {
        let host = try await startHost()
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        try await client.send(.request(RequestFrame(channel: 1, id: 1, message: EncodedValueSet(["Action": "send"]))))
        guard case .request(let asked) = try await client.next() else {
            Issue.record("the service's message did not arrive")
            return
        }
        // status 2^40 as a raw CBOR unsigned integer: no frame type of ours can hold it.
        let body: ValueSet = ["type": "response", "channel": .int(Int64(asked.channel)), "id": .int(Int64(asked.id))]
        var bytes = body.cborBytes()
        bytes[0] = 0xa5  // five keys: the three above, then status and message
        bytes += [0x66] + Array("status".utf8) + [0x1b, 0, 0, 1, 0, 0, 0, 0, 0]
        bytes += [0x67] + Array("message".utf8) + [0xa1, 0x61, 0x78, 0x01]
        try await client.sendRaw(TestClient.frame(bytes))
        let answer = try await client.response()
        // The service saw status 3 (Unknown), and answers with the status it saw.
        #expect(answer.status == .unknown)
        #expect(try answer.decoded["ClientStatus"] == .int(3))
        try await expectServing(host)
        #expect(await host.stop() == 0)
    }

    @Test func negativeAndOutOfRangeStatusesFromPluginsAreAnsweredAsUnknown() async throws {
        var manifests = Fixtures.all
        manifests["c.json"] = PluginABITests.cServiceManifest
        let host = try await startHost(manifests: manifests)
        let client = try await connectedClient(host)
        // A Swift service returning -1 and 2^32 from open (PluginKit cannot pass them on).
        #expect(try await client.open(channel: 1, service: "refuse.-1", package: Fixtures.testPackage) == .unknown)
        #expect(
            try await client.open(channel: 2, service: "refuse.4294967296", package: Fixtures.testPackage) == .unknown)
        // A C service returning -3 from open: refused as Unknown, with the reason logged.
        #expect(try await client.open(channel: 3, service: "status.-3", package: "atrium.tests.c") == .unknown)
        #expect(await host.waitForLog("the plugin answered open with -3"))
        // A value no enumeration names, but that fits, passes through unchanged.
        #expect(
            try await client.open(channel: 4, service: "status.2147483647", package: "atrium.tests.c")
                == AppServiceConnectionStatus(rawValue: 2_147_483_647))
        // Launches: a Swift service answering -1 and 2^40, a C service answering -9.
        for (id, status) in [(1, -1), (2, 1 << 40)] {
            try await client.send(
                .launch(
                    LaunchFrame(
                        id: UInt64(id), uri: "atrium-test:x", data: EncodedValueSet(["Status": .int(Int64(status))]))))
            guard case .launched(let launched) = try await client.next() else {
                Issue.record("no launched frame")
                return
            }
            #expect(launched.status == .unknown, "status \(status)")
        }
        try await client.send(.launch(LaunchFrame(id: 3, uri: "atrium-ctest:status/-9")))
        guard case .launched(let launched) = try await client.next() else {
            Issue.record("no launched frame")
            return
        }
        #expect(launched.status == .unknown)
        #expect(launched.error == "package \"atrium.tests.c\" answered the launch with an invalid status (-9)")
        try await expectServing(host)
        #expect(await host.stop() == 0)
    }

    @Test(arguments: [5, 1_000_000])
    func textsWithNULsComeBackWholeThroughTheCTable(length: Int) async throws {
        let host = try await startHost(
            manifests: ["c.json": PluginABITests.cServiceManifest] + Fixtures.referenceManifests)
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "c", package: "atrium.tests.c") == .success)
        var text = "ab\u{0}cd"
        if length > text.utf8.count {
            text += String(repeating: "x\u{0}", count: (length - text.utf8.count) / 2)
        }
        let answer = try await client.request(channel: 1, id: 1, ["Text": .string(text)])
        #expect(answer.status == .success, "\(answer.error ?? "")")
        let decoded = try answer.decoded
        // The plugin copied out_length bytes: exactly the text, NULs and all, nothing after it.
        #expect(decoded["Text"] == .string(text))
        #expect(decoded["TextLength"] == 2, "strlen stops at the first NUL")
        try await expectServing(host)
        #expect(await host.stop() == 0)
    }

    @Test func aSerialPluginLaunchingItsOwnSchemeFromItsCallbackIsRefusedNotTrapped() async throws {
        let host = try await startHost(
            manifests: ["c.json": PluginABITests.cServiceManifest] + Fixtures.referenceManifests)
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "c", package: "atrium.tests.c") == .success)
        for key in ["LaunchOwn", "LaunchFor"] {
            let answer = try await client.request(channel: 1, id: 1, [key: "atrium-ctest:hello"])
            #expect(
                try answer.decoded["LaunchStatus"] == .int(Int64(RemoteLaunchUriStatus.deniedByLocalSystem.rawValue)))
        }
        #expect(await host.waitForLog("launched its own scheme from inside one of its callbacks"))
        // The same launch from a client reaches the plugin as usual.
        try await client.send(.launch(LaunchFrame(id: 9, uri: "atrium-ctest:hello")))
        #expect(try await client.next() == .launched(LaunchedFrame(id: 9, status: .success)))
        try await expectServing(host)
        #expect(await host.stop() == 0)
    }

    @Test func aCycleOfPluginsLaunchingEachOtherEndsAtItsFirstStepBack() async throws {
        // Two serial plugins (two packages of the C test service): A launches B's scheme from
        // its request; B's launch callback launches A's scheme, while A's queue waits for B.
        func manifest(_ name: String) -> String {
            """
            { "manifestVersion": 1, "package": "atrium.tests.cycle.\(name)", "library": "libAtriumTestCService.so",
              "services": [{ "name": "c", "supportsRemoteSystems": true }], "schemes": ["cycle-\(name)"] }
            """
        }
        // A response timeout far beyond the test's waits: ending there would fail the test.
        let host = try await startHost(
            arguments: ["--response-timeout", "120"],
            manifests: ["a.json": manifest("a"), "b.json": manifest("b")] + Fixtures.referenceManifests)
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "c", package: "atrium.tests.cycle.a") == .success)
        try await client.send(
            .request(
                RequestFrame(
                    channel: 1, id: 1, message: EncodedValueSet(["LaunchOwn": "cycle-b:relay/cycle-a:hello"]))))
        let answer = try await client.response(timeout: .seconds(10))
        // A's launch into B succeeded as far as B: B's launch back into A was refused at once.
        #expect(try answer.decoded["LaunchStatus"] == .int(Int64(RemoteLaunchUriStatus.deniedByLocalSystem.rawValue)))
        #expect(await host.waitForLog("is waiting for a launch it made from one of its callbacks"))
        // With A idle, the same relay from a client goes through: B launches A, which answers.
        try await client.send(.launch(LaunchFrame(id: 9, uri: "cycle-b:relay/cycle-a:hello")))
        #expect(try await client.next() == .launched(LaunchedFrame(id: 9, status: .success)))
        try await expectServing(host)
        #expect(await host.stop() == 0)
    }

    @Test func aDescriptorSmallerThanTheHeadersIsReadOnlyAsFarAsItGoes() async throws {
        // The descriptor ends where the plugin says (just after create) at the very end of a
        // page, and the next page is unmapped: reading one byte past it would crash the host.
        let library = try await PluginLoadingTests().buildPlugin(
            named: "Short",
            source: """
                #define _GNU_SOURCE
                #include <stddef.h>
                #include <string.h>
                #include <sys/mman.h>
                #include "atrium_plugin.h"
                static int32_t create(const atrium_host_api *h, const char *c, void **i) { (void)h; (void)c; *i = 0; return 0; }
                const atrium_plugin *atrium_plugin_entry_v1(void) {
                    static atrium_plugin *p = 0;
                    if (p) return p;
                    long page = 4096;
                    unsigned char *pages = mmap(0, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                    mprotect(pages + page, page, PROT_NONE);
                    size_t size = offsetof(atrium_plugin, create) + sizeof(void *);
                    atrium_plugin header = { (uint32_t)size, 1, 0, "Short", "0", 0, create, 0, 0, 0, 0, 0, 0 };
                    p = (atrium_plugin *)(pages + page - size);
                    memcpy(p, &header, size);
                    return p;
                }
                """)
        let host = try await startHost(
            manifests: ["short.json": PluginLoadingTests().manifest("atrium.tests.short", library)]
                + Fixtures.referenceManifests)
        let client = try await connectedClient(host)
        // No open callback in so short a descriptor: every channel is accepted; no request
        // callback: requests are answered with status 1.
        #expect(try await client.open(channel: 1, service: "s", package: "atrium.tests.short") == .success)
        let answer = try await client.request(channel: 1, id: 1, ["a": 1])
        #expect(answer.status == .failure && answer.error == "the service does not take requests")
        try await expectServing(host)
        #expect(await host.stop() == 0)
    }
}

extension Dictionary where Key == String, Value == String {
    /// The manifests of both, the right side winning.
    static func + (lhs: Self, rhs: Self) -> Self { lhs.merging(rhs) { $1 } }
}
