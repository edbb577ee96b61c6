import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import NIOCore
import Testing

/// Bad clients, disconnects, blocking plugins and shutdown: the host answers, closes only the
/// offending connection, and keeps serving everyone else.
@Suite(.serialized)
struct RobustnessTests {
    /// A frame with `body` as it is.
    func rawFrame(_ body: [UInt8]) -> [UInt8] {
        withUnsafeBytes(of: UInt32(body.count).bigEndian) { Array($0) } + body
    }

    /// Sends `bytes` on a fresh connection (after hello when `greet`) and returns the error
    /// frame the host answers with; checks that the host then closes the connection.
    func protocolError(
        _ host: TestHost, _ bytes: [UInt8], greet: Bool = true, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> ErrorFrame? {
        let client = try await TestClient.connect(port: host.port)
        if greet { try await client.hello() }
        try await client.sendRaw(bytes)
        let frame = try await client.next()
        guard case .error(let error) = frame else {
            Issue.record("expected an error frame, got \(String(describing: frame))", sourceLocation: sourceLocation)
            return nil
        }
        #expect(try await client.next() == nil, "the host closed the connection", sourceLocation: sourceLocation)
        return error
    }

    @Test func badFramesGetAnErrorAndACloseWhileOthersCarryOn() async throws {
        let host = try await startHost(arguments: ["--max-frame-bytes", "65536", "--max-message-bytes", "1024"])
        let bystander = try await connectedClient(host, clientId: "bystander")
        #expect(
            try await bystander.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage)
                == .success)

        let malformed = try await protocolError(host, rawFrame([0xa1, 0x1c]))
        #expect(malformed?.code == .malformedFrame)
        #expect(malformed?.message.contains("not well-formed CBOR") == true)

        let notAMap = try await protocolError(host, rawFrame([0x83, 1, 2, 3]))
        #expect(notAMap == ErrorFrame(code: .malformedFrame, message: "frame must be a CBOR map, not an array"))

        let missing = try await protocolError(
            host, rawFrame((["type": "request", "channel": 1] as ValueSet).cborBytes()))
        #expect(missing == ErrorFrame(code: .malformedFrame, message: #"request: key "id" is missing"#))

        let mistyped = try await protocolError(
            host,
            rawFrame((["type": "open", "channel": "one", "service": "s", "package": "p"] as ValueSet).cborBytes()))
        #expect(mistyped?.message == #"open: key "channel" must be an unsigned integer, not a text string"#)

        let oversized = try await protocolError(host, withUnsafeBytes(of: UInt32(65537).bigEndian) { Array($0) })
        #expect(
            oversized
                == ErrorFrame(code: .frameTooLarge, message: "a frame of 65537 bytes is over the limit of 65536 bytes"))

        let beforeHello = try await protocolError(
            host, rawFrame((["type": "ping", "id": 1] as ValueSet).cborBytes()), greet: false)
        #expect(beforeHello == ErrorFrame(code: .helloRequired, message: "the first frame must be hello, not ping"))

        let wrongVersion = try await protocolError(
            host, rawFrame((["type": "hello", "version": 2, "clientId": "c"] as ValueSet).cborBytes()), greet: false)
        #expect(wrongVersion?.code == .unsupportedVersion)

        let secondHello = try await protocolError(
            host, rawFrame((["type": "hello", "version": 1, "clientId": "c"] as ValueSet).cborBytes()))
        #expect(secondHello?.code == .duplicateHello)

        // A client that ends its sending side in the middle of a frame: the host says so.
        let halfway = try await TestClient.connect(port: host.port)
        try await halfway.hello()
        try await halfway.sendRaw(Array(rawFrame((["type": "ping", "id": 1] as ValueSet).cborBytes()).prefix(7)))
        try await halfway.closeOutput()
        #expect(
            try await halfway.next()
                == .error(
                    ErrorFrame(code: .truncatedFrame, message: "the connection ended 7 bytes into an incomplete frame"))
        )
        #expect(try await halfway.next() == nil, "the host closed the connection")

        // An unknown type is answered, and the connection stays open.
        let curious = try await connectedClient(host)
        try await curious.sendRaw(rawFrame((["type": "teleport", "to": "mars"] as ValueSet).cborBytes()))
        #expect(
            try await curious.next()
                == .error(ErrorFrame(code: .unknownType, message: #"unknown frame type "teleport""#)))
        try await curious.send(.ping(id: 1))
        #expect(try await curious.next() == .pong(id: 1))

        // The bystander noticed nothing.
        let echo = try await bystander.request(channel: 1, id: 1, ["Still": "here"])
        #expect(try echo.decoded == ["Still": "here"])
        await bystander.close()
        await curious.close()
        #expect(await host.stop() == 0)
    }

    @Test func aConnectionCutInsideAFrameIsLoggedAndHurtsNoOne() async throws {
        let host = try await startHost()
        let cut = try await TestClient.connect(port: host.port)
        try await cut.hello()
        try await cut.sendRaw(Array(rawFrame((["type": "ping", "id": 1] as ValueSet).cborBytes()).prefix(9)))
        // Another client, before and after the cut.
        let other = try await connectedClient(host, clientId: "other")
        try await other.send(.ping(id: 2))
        #expect(try await other.next() == .pong(id: 2))
        await cut.close()
        #expect(
            await host.waitForLog(
                "protocol error: truncatedFrame: the connection ended 9 bytes into an incomplete frame"))
        try await other.send(.ping(id: 3))
        #expect(try await other.next() == .pong(id: 3))
        await other.close()
        #expect(await host.stop() == 0)
    }

    @Test func aClientThatDisconnectsWithRequestsInFlightHurtsNoOne() async throws {
        let host = try await startHost()
        let leaver = try await connectedClient(host, clientId: "leaver")
        #expect(try await leaver.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        for id in 0..<20 {
            try await leaver.send(
                .request(
                    RequestFrame(
                        channel: 1, id: UInt64(id), message: EncodedValueSet(["Action": "late", "DelayMs": 200]))))
        }
        await leaver.close()

        let stayer = try await connectedClient(host, clientId: "stayer")
        #expect(try await stayer.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        try await Task.sleep(for: .milliseconds(400))  // the plugin answers the departed client's requests now
        let answer = try await stayer.request(channel: 1, id: 1, ["Action": "echo"])
        #expect(answer.status == .success && answer.id == 1)
        try await stayer.send(.ping(id: 2))
        #expect(try await stayer.next() == .pong(id: 2), "no stray answers meant for the other client")
        await stayer.close()
        #expect(await host.stop() == 0)
    }

    @Test func aBlockingPluginDoesNotHoldUpOthers() async throws {
        let host = try await startHost()
        let blocked = try await connectedClient(host, clientId: "blocked")
        #expect(try await blocked.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        try await blocked.send(
            .request(RequestFrame(channel: 1, id: 1, message: EncodedValueSet(["Action": "block", "DelayMs": 1500]))))
        try await Task.sleep(for: .milliseconds(100))

        let other = try await connectedClient(host, clientId: "other")
        #expect(
            try await other.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        #expect(
            try await other.open(channel: 2, service: Fixtures.romanService, package: Fixtures.romanPackage) == .success
        )
        for id in 0..<10 {
            #expect(try await other.request(channel: 1, id: UInt64(id), ["N": .int(Int64(id))]).status == .success)
        }
        #expect(try await other.request(channel: 2, id: 99, ["Type": "ping"]).status == .success)
        try await other.send(.ping(id: 100))
        #expect(try await other.next() == .pong(id: 100))
        // Only now does the blocked request finish: everything above got through before it.
        let late = try await blocked.response(timeout: .seconds(10))
        #expect(late.status == .success)
        await blocked.close()
        await other.close()
        #expect(await host.stop() == 0)
    }

    @Test func shutdownAnswersRequestsInFlightClosesChannelsAndExitsZero() async throws {
        let host = try await startHost(arguments: ["--drain-timeout", "5"])
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        try await client.send(
            .request(RequestFrame(channel: 1, id: 1, message: EncodedValueSet(["Action": "late", "DelayMs": 300]))))
        try await client.send(.request(RequestFrame(channel: 1, id: 2, message: EncodedValueSet(["Action": "hang"]))))
        // The host has taken both requests once it answers a ping sent after them.
        try await client.send(.ping(id: 3))
        var frames: [HostFrame] = []
        while let frame = try await client.next(), frame != .pong(id: 3) { frames.append(frame) }
        async let exit = host.stop(signal: SIGTERM)

        while let frame = try await client.next(timeout: .seconds(15)) { frames.append(frame) }
        let responses = frames.compactMap { frame -> ResponseFrame? in
            if case .response(let response) = frame { return response }
            return nil
        }
        #expect(responses.first { $0.id == 1 }?.status == .success, "the request that could finish, finished")
        let hung = responses.first { $0.id == 2 }
        #expect(hung?.status == .remoteSystemUnavailable, "the one that could not was given a status")
        #expect(hung?.error == "the host shut down before the service answered")
        #expect(frames.contains(.closed(ClosedFrame(channel: 1, status: .canceled))), "the channel was closed")
        #expect(responses.count == 2)
        #expect(await exit == 0)
    }

    @Test func shutdownWithSIGINTAndNoClientsExitsZero() async throws {
        let host = try await startHost()
        #expect(await host.stop(signal: SIGINT) == 0)
        #expect(!FileManager.default.fileExists(atPath: host.socketPath), "the socket file is removed")
    }

    @Test func badManifestsAreSkippedWithAReasonAndTheRestLoad() async throws {
        var manifests = Fixtures.referenceManifests
        manifests["broken.json"] = "{ not json"
        manifests["bad-name.json"] =
            #"{"manifestVersion": 1, "package": "has space", "library": "x.so", "services": [{"name": "s"}]}"#
        manifests["zz-duplicate.json"] =
            #"{"manifestVersion": 1, "package": "atrium.examples.echo", "library": "libEcho.so", "services": [{"name": "s"}]}"#
        manifests["zz-wrong-abi.json"] =
            #"{"manifestVersion": 1, "package": "atrium.tests.notaplugin", "library": "/lib/x86_64-linux-gnu/libz.so.1", "services": [{"name": "s", "supportsRemoteSystems": true}]}"#
        let host = try await startHost(manifests: manifests)
        let log = host.log
        #expect(
            log.contains(
                "manifest skipped: broken.json:1: is not valid JSON: column 3: a key in double quotes should be here, not 'n'"
            )
        )
        #expect(
            log.contains(
                #"manifest skipped: bad-name.json:1: package: "has space" holds " ": only letters, digits, '.', '_' and '-' are allowed"#
            ))
        #expect(
            log.contains(
                #"manifest skipped: zz-duplicate.json:1: package: "atrium.examples.echo" is already declared by echo.json"#
            ))
        #expect(log.contains("does not export atrium_plugin_entry_v1") || log.contains("not found"))
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        #expect(try await client.open(channel: 2, service: "s", package: "atrium.tests.notaplugin") == .appUnavailable)
        await client.close()
        #expect(await host.stop() == 0)
    }

    /// A refused open says why in its `error`: in full to a local client, and without the
    /// host's files to a remote one.
    @Test func aRefusedOpenSaysWhy() async throws {
        var manifests = Fixtures.referenceManifests
        manifests["missing.json"] =
            #"{"manifestVersion": 1, "package": "atrium.tests.missing", "library": "libNowhere.so", "services": [{"name": "s", "supportsRemoteSystems": true}]}"#
        manifests["local.json"] =
            #"{"manifestVersion": 1, "package": "atrium.tests.local", "library": "libEcho.so", "services": [{"name": "s"}]}"#
        let host = try await startHost(manifests: manifests)
        let remote = try await connectedClient(host)
        let local = try await TestClient.connect(unixSocket: host.socketPath)
        try await local.hello()
        let cases: [(String, String, AppServiceConnectionStatus, String, String)] = [
            (
                "atrium.tests.nope", "s", .appNotInstalled, #"no package "atrium.tests.nope" is installed"#,
                #"no package "atrium.tests.nope" is installed"#
            ),
            (
                Fixtures.echoPackage, "nope", .appServiceUnavailable,
                #"package "\#(Fixtures.echoPackage)" has no service "nope""#,
                #"package "\#(Fixtures.echoPackage)" has no service "nope""#
            ),
            (
                "atrium.tests.missing", "s", .appUnavailable,
                #"package "atrium.tests.missing" is not available: library libNowhere.so not found (looked at "#,
                #"package "atrium.tests.missing" is not available: its plugin is not running (the host's log says why)"#
            ),
        ]
        for (index, (package, service, status, localReason, remoteReason)) in cases.enumerated() {
            let toLocal = try await local.opened(channel: UInt64(index), service: service, package: package)
            #expect(toLocal.status == status)
            #expect(toLocal.error?.hasPrefix(localReason) == true, "\(String(describing: toLocal.error))")
            let toRemote = try await remote.opened(channel: UInt64(index), service: service, package: package)
            #expect(toRemote.status == status)
            #expect(toRemote.error == remoteReason, "\(String(describing: toRemote.error))")
        }
        // Local-only service, over TCP.
        let localOnly = try await remote.opened(channel: 9, service: "s", package: "atrium.tests.local")
        #expect(localOnly.status == .remoteSystemNotSupportedByApp)
        #expect(
            localOnly.error == #"service "s" does not accept remote callers (supportsRemoteSystems is false)"#,
            "\(String(describing: localOnly.error))")
        // A client's text comes back escaped, and cut.
        let odd = try await remote.opened(
            channel: 10, service: "s", package: "bad\u{1b}[31m" + String(repeating: "x", count: 600))
        #expect(odd.status == .appNotInstalled)
        #expect(
            odd.error?.contains("\u{1b}") == false && odd.error?.contains("\\u{1B}") == true,
            "\(String(describing: odd.error))")
        #expect((odd.error?.count ?? 0) < 500)
        // Success carries no error.
        let fine = try await remote.opened(channel: 11, service: Fixtures.echoService, package: Fixtures.echoPackage)
        #expect(fine.status == .success && fine.error == nil)
        await remote.close()
        await local.close()
        #expect(await host.stop() == 0)
    }
}
