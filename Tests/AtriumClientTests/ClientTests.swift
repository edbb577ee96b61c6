import AtriumClient
import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// The client library against a real atriumd.
@Suite(.serialized)
struct ClientTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let roman = ("5085ShawnHenry.RomanTestApp_jsjw7knzsgcce", "com.microsoft.test.cdppingpongservice")
    static let testPackage = "atrium.tests.service"

    static var manifests: [String: String] {
        var manifests: [String: String] = [:]
        let folder = root.appendingPathComponent("manifests")
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        where name.hasSuffix(".json") {
            manifests[name] = try? String(contentsOf: folder.appendingPathComponent(name), encoding: .utf8)
        }
        manifests["test.json"] = """
            { "manifestVersion": 1, "package": "\(testPackage)", "library": "libAtriumTestService.so",
              "services": [{ "name": "test", "supportsRemoteSystems": true }, { "name": "local.only" },
                           { "name": "refuse.7", "supportsRemoteSystems": true }] }
            """
        manifests["missing.json"] = """
            { "manifestVersion": 1, "package": "atrium.tests.missing", "library": "libDoesNotExist.so",
              "services": [{ "name": "nothing", "supportsRemoteSystems": true }] }
            """
        return manifests
    }

    func host(_ arguments: [String] = []) async throws -> TestHost {
        try await TestHost.start(manifests: Self.manifests, arguments: arguments)
    }

    @Test func endpointsParse() {
        #expect(AtriumEndpoint("127.0.0.1:7340")?.address == .tcp(host: "127.0.0.1", port: 7340))
        #expect(AtriumEndpoint("phone.local")?.address == .tcp(host: "phone.local", port: 7340))
        #expect(AtriumEndpoint("[::1]:99")?.address == .tcp(host: "::1", port: 99))
        #expect(AtriumEndpoint("unix:/run/a.sock")?.address == .unix(path: "/run/a.sock"))
        #expect(AtriumEndpoint("host:notaport") == nil)
        #expect(AtriumEndpoint("host:0") == nil)
        // `unix:` alone is the host's default local socket, where atriumd puts it.
        #expect(AtriumEndpoint("unix:")?.address == .unix(path: defaultLocalSocketPath()))
        #expect(AtriumEndpoint("[::1]:99")?.description == "[::1]:99")
    }

    @Test func connectPingAppsAndRomanPing() async throws {
        let host = try await host()
        let connection = try await AtriumConnection.connect(
            to: AtriumEndpoint("127.0.0.1:\(host.port)")!, clientId: "phone")
        #expect(connection.welcome.platform == "linux")
        #expect(connection.limits == .default)
        _ = try await connection.ping()
        let apps = try await connection.apps()
        #expect(apps.contains { $0.package == Self.roman.0 && $0.services == [Self.roman.1] })

        let ping = AppServiceConnection(appServiceName: Self.roman.1, packageId: Self.roman.0, connection: connection)
        #expect(try await ping.openRemote() == .success)
        let when = Timestamp(secondsSince1970: 1_763_700_000.5)
        let pong = try await ping.sendMessage(["Type": "ping", "CreationDate": .date(when), "TargetId": "phone"])
        #expect(pong.status == .success)
        #expect(pong.message == ["Type": "pong", "CreationDate": .date(when), "TargetId": "phone"])

        struct Ping: Codable { var `Type`: String; var TargetId: String }
        let typed = try await ping.sendMessage(encoding: Ping(Type: "ping", TargetId: "codable"))
        #expect(try typed.decode(Ping.self).TargetId == "codable")
        await ping.close()
        await connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func everyStatusReachesTheCaller() async throws {
        // 3 s: every answer but the hung one's comes well within it, also on a loaded machine.
        let host = try await host(["--max-message-bytes", "1000", "--response-timeout", "3"])
        let connection = try await AtriumConnection.connect(to: AtriumEndpoint("127.0.0.1:\(host.port)")!)
        // The host says how long it waits for a service; the client waits 5 s more by default.
        #expect(connection.hostResponseTimeout == .seconds(3))
        #expect(connection.defaultTimeout == .seconds(8))
        func open(_ service: String, _ package: String) async throws -> (AppServiceConnectionStatus, String?) {
            let app = AppServiceConnection(appServiceName: service, packageId: package, connection: connection)
            return (try await app.openRemote(), app.openError)
        }
        #expect(
            try await open("x", "no.such.package") == (.appNotInstalled, #"no package "no.such.package" is installed"#))
        #expect(
            try await open("nothing", "atrium.tests.missing")
                == (
                    .appUnavailable,
                    #"package "atrium.tests.missing" is not available: its plugin is not running (the host's log says why)"#
                ))
        #expect(
            try await open("nope", Self.testPackage)
                == (.appServiceUnavailable, #"package "\#(Self.testPackage)" has no service "nope""#))
        #expect(try await open("local.only", Self.testPackage).0 == .remoteSystemNotSupportedByApp)
        #expect(
            try await open("refuse.7", Self.testPackage)
                == (.notAuthorized, "the service refused the connection (its open answered NotAuthorized (7))"))

        let service = AppServiceConnection(appServiceName: "test", packageId: Self.testPackage, connection: connection)
        #expect(try await service.openRemote() == .success)
        let failed = try await service.sendMessage(["Action": "fail"])
        #expect(failed.status == .failure && failed.error == "failed, as asked")
        let big = try await service.sendMessage(["Blob": .bytes(Array(repeating: 0, count: 2000))])
        #expect(big.status == .messageSizeTooLarge)
        let unanswered = try await service.sendMessage(["Action": "hang"])
        #expect(unanswered.status == .resourceLimitsExceeded)
        #expect(unanswered.error == "the service did not answer within 3 seconds")
        // A client that waits less than the host is told the service may still be working.
        await #expect {
            _ = try await service.sendMessage(["Action": "hang"], timeout: .milliseconds(100))
        } throws: { error in
            let message = (error as? AtriumClientError)?.message ?? "\(error)"
            return message
                == "no answer within 0.1 s (request): the service may still be working; the host waits 3 s before it answers for the service itself (wait longer than that to hear which)"
        }
        let thrown = try await service.sendMessage(["Action": "throw"])
        #expect(thrown.status == .failure && thrown.error == "the test service threw, as asked")
        await connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func serviceMessagesArriveAndAreAnswered() async throws {
        let host = try await host()
        let connection = try await AtriumConnection.connect(to: AtriumEndpoint("127.0.0.1:\(host.port)")!)
        let service = AppServiceConnection(appServiceName: "test", packageId: Self.testPackage, connection: connection)
        #expect(try await service.openRemote() == .success)
        let responder = Task {
            for await request in service.requests {
                #expect(request.message == ["Hello": "client"])
                try await request.respond(["Reply": "from the client"])
            }
        }
        let answer = try await service.sendMessage(["Action": "send"])
        #expect(answer.message == ["ClientSaid": ["Reply": "from the client"], "ClientStatus": 0])

        _ = try await service.sendMessage(["Action": "close", "Status": 1])
        var statuses: [AppServiceClosedStatus] = []
        for await status in service.serviceClosed { statuses.append(status) }
        #expect(statuses == [.canceled])
        await #expect(throws: AtriumClientError.self) { try await service.sendMessage(["After": "close"]) }
        responder.cancel()
        await connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func timeoutsCancellationAndTheHostGoingAway() async throws {
        let host = try await host()
        let connection = try await AtriumConnection.connect(to: AtriumEndpoint("127.0.0.1:\(host.port)")!)
        let service = AppServiceConnection(appServiceName: "test", packageId: Self.testPackage, connection: connection)
        #expect(try await service.openRemote() == .success)

        let timedOut = await #expect(throws: AtriumClientError.self) {
            try await service.sendMessage(["Action": "hang"], timeout: .milliseconds(200))
        }
        #expect(timedOut?.code == .timedOut)

        // The answer comes only once released, after the cancellation however late this task
        // runs.
        let cancelled = Task { try await service.sendMessage(["Action": "wait"]) }
        try await Task.sleep(for: .milliseconds(50))
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        // The late answer arrives (most often within the pause), and is dropped: the next
        // call gets its own answer.
        #expect(try await service.sendMessage(["Action": "release"]).status == .success)
        try await Task.sleep(for: .milliseconds(300))
        #expect(try await service.sendMessage(["Action": "echo"]).status == .success, "nothing was left behind")

        let inFlight = Task { try await service.sendMessage(["Action": "hang"]) }
        try await Task.sleep(for: .milliseconds(50))
        await host.stop(signal: SIGKILL)
        let gone = await #expect(throws: AtriumClientError.self) { try await inFlight.value }
        #expect(gone?.code == .hostWentAway)
        let after = await #expect(throws: AtriumClientError.self) { try await connection.ping() }
        #expect(after?.code == .hostWentAway)
    }

    @Test func connectingToNothingSaysSo() async throws {
        let error = await #expect(throws: AtriumClientError.self) {
            try await AtriumConnection.connect(to: AtriumEndpoint("unix:/nonexistent/atriumd.sock")!)
        }
        #expect(error?.code == .cannotConnect)
        #expect(error?.message.contains("Is atriumd running there") == true)
        let unopened = try await host()
        let connection = try await AtriumConnection.connect(to: AtriumEndpoint("unix:\(unopened.socketPath)")!)
        let service = AppServiceConnection(
            appServiceName: "local.only", packageId: Self.testPackage, connection: connection)
        let early = await #expect(throws: AtriumClientError.self) { try await service.sendMessage([:]) }
        #expect(early?.code == .channelNotOpen)
        #expect(try await service.openRemote() == .success, "the local socket may open local-only services")
        await connection.close()
        #expect(await unopened.stop() == 0)
    }
}

/// The README's client example, kept compiling and true.
@Suite(.serialized)
struct ReadmeClientExampleTests {
    @Test func firstTasteOfTheClient() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests)
        let connection = try await AtriumConnection.connect(to: AtriumEndpoint("127.0.0.1:\(host.port)")!)
        let ping = AppServiceConnection(
            appServiceName: "com.microsoft.test.cdppingpongservice",
            packageId: "5085ShawnHenry.RomanTestApp_jsjw7knzsgcce",
            connection: connection
        )
        #expect(try await ping.openRemote() == .success)
        let response = try await ping.sendMessage(["Type": "ping", "CreationDate": .date(.now), "TargetId": "me"])
        #expect(response.status == .success && response.message["Type"] == "pong")
        await connection.close()
        #expect(await host.stop() == 0)
    }
}
