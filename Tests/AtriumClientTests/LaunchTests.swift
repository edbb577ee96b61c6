import AtriumClient
import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// Launching URIs through a real atriumd: resolution, fallback, statuses, and the client API.
@Suite(.serialized)
struct LaunchTests {
    static var manifests: [String: String] {
        var manifests = ClientTests.manifests
        manifests["launcher-a.json"] = """
            { "manifestVersion": 1, "package": "atrium.tests.launcher.a", "library": "libAtriumTestService.so",
              "schemes": ["atrium-test", "https"], "config": { "greeting": "first" } }
            """
        manifests["launcher-b.json"] = """
            { "manifestVersion": 1, "package": "atrium.tests.launcher.b", "library": "libAtriumTestService.so",
              "schemes": ["atrium-test", "Only-B"], "config": { "greeting": "second" } }
            """
        return manifests
    }

    @Test func resolutionRules() async throws {
        let host = try await TestHost.start(manifests: Self.manifests, arguments: ["--launch-data-limit", "64"])
        let connection = try await AtriumConnection.connect(
            to: AtriumEndpoint("127.0.0.1:\(host.port)")!, clientId: "phone")
        let launcher = RemoteLauncher(connection: connection)

        // Several packages declare the scheme, none preferred: the first in manifest order.
        let first = try await launcher.launchUri("atrium-test://one", options: .init(data: ["Page": 3]))
        #expect(first.status == .success && first.error == nil)
        #expect(await host.waitForLog(#"first launched atrium-test://one for phone remote true data {"Page": 3}"#))

        // A preferred package wins; an unknown preferred one is passed over.
        let preferred = try await launcher.launchUri(
            "atrium-test://two", options: .init(preferredPackages: ["no.such", "atrium.tests.launcher.b"]))
        #expect(preferred.status == .success)
        #expect(await host.waitForLog("second launched atrium-test://two"))

        // A targeted package must declare the scheme.
        let targeted = try await launcher.launchUri(
            "ATRIUM-TEST://three", options: .init(package: "atrium.tests.launcher.b"))
        #expect(targeted.status == .success, "schemes compare case-insensitively")
        let wrongTarget = try await launcher.launchUri(
            "atrium-test://four", options: .init(package: "atrium.examples.echo"))
        #expect(wrongTarget.status == .appUnavailable)
        #expect(wrongTarget.error == #"package "atrium.examples.echo" does not handle the scheme atrium-test"#)

        // No handler: the fallback (http or https only), else ProtocolUnavailable.
        let fallback = try await launcher.launchUri("nobody://x", options: .init(fallbackUri: "https://example.org/a"))
        #expect(fallback.status == .success)
        #expect(await host.waitForLog("first launched https://example.org/a"))
        let badFallback = try await launcher.launchUri("nobody://x", options: .init(fallbackUri: "ftp://example.org"))
        #expect(badFallback.status == .protocolUnavailable)
        let none = try await launcher.launchUri("nobody://x")
        #expect(none.status == .protocolUnavailable && none.error == "no package handles the scheme nobody")

        // The plugin's own answer, too large data, malformed URIs.
        let refused = try await launcher.launchUri("only-b:x", options: .init(data: ["Status": 6]))
        #expect(refused.status == .deniedByLocalSystem)
        let big = try await launcher.launchUri(
            "atrium-test://big", options: .init(data: ["Blob": .bytes(Array(repeating: 0, count: 100))]))
        #expect(big.status == .valueSetTooLarge)
        for malformed in ["no scheme here", ":empty-scheme", "1abc://digit-first", "sp ace://x"] {
            let answer = try await launcher.launchUri(malformed)
            #expect(answer.status == .protocolUnavailable, "\(malformed)")
            #expect(answer.error?.contains("is not a URI with a valid scheme") == true, "\(malformed)")
        }
        await connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func romanPingLaunchesThroughTheSameRegistry() async throws {
        let host = try await TestHost.start(manifests: Self.manifests)
        let connection = try await AtriumConnection.connect(
            to: AtriumEndpoint("127.0.0.1:\(host.port)")!, clientId: "roman-caller")
        let ping = AppServiceConnection(
            appServiceName: "com.microsoft.test.cdppingpongservice",
            packageId: "5085ShawnHenry.RomanTestApp_jsjw7knzsgcce",
            connection: connection
        )
        #expect(try await ping.openRemote() == .success)
        let answer = try await ping.sendMessage(["Type": "LaunchUri", "Uri": "atrium-test://from-roman"])
        #expect(answer.message["Type"] == "Ok")
        // Roman ping launches on behalf of the client that asked: its identity, remote.
        #expect(await host.waitForLog("first launched atrium-test://from-roman for roman-caller remote true data none"))
        let own = try await RemoteLauncher(connection: connection).launchUri("roman-test://hello")
        #expect(own.status == .success)
        #expect(await host.waitForLog("opened with roman-test://hello"))
        // The scheme arrives lowercased, the rest as sent.
        let shouted = try await RemoteLauncher(connection: connection).launchUri("ROMAN-Test://Hello/World?Q=A")
        #expect(shouted.status == .success)
        #expect(await host.waitForLog("opened with roman-test://Hello/World?Q=A"))
        await connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func theLaunchCommand() async throws {
        let host = try await TestHost.start(manifests: Self.manifests)
        let address = "127.0.0.1:\(host.port)"
        let ok = try await atrium([
            "launch", address, "atrium-test://cli", "--prefer", "atrium.tests.launcher.b", "--data",
            #"{"From": "cli"}"#,
        ])
        #expect(ok.status == 0 && ok.output == "launch atrium-test://cli: Success (1)\n")
        #expect(await host.waitForLog(#"second launched atrium-test://cli for"#))
        let missing = try await atrium(["launch", address, "nobody://x", "--json-output"])
        #expect(missing.status == 1)
        #expect(missing.output.contains(#""statusName":"ProtocolUnavailable (3)""#), "\(missing.output)")
        let usage = try await atrium(["launch", address, "x://y", "--data", "[1]"])
        #expect(usage.status == 64 && usage.output.contains("--data: the message must be a JSON object"))
        #expect(await host.stop() == 0)
    }
}
