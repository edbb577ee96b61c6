import AtriumClient
import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// The audit log (`--audit-log`): one JSON object per line for every security event, with
/// the device's identity and address, against a real atriumd that requires pairing.
@Suite(.serialized)
struct AuditLogTests {
    @Test func everyPairingOpenLaunchAndRevocationIsALine() async throws {
        let file = TLSTests.temporaryFolder("audit").appendingPathExtension("jsonl")
        let host = try await TestHost.start(
            manifests: ClientTests.manifests, arguments: PairingTests.arguments + ["--audit-log", file.path])
        #expect(try TLSTests.mode(file) == 0o600)
        let admin = try await PairingTests.operatorConnection(host)
        let stranger = try await PairingTests.device(host)
        #expect(try await PairingTests.opensEcho(stranger) == .notAuthorized)
        await #expect(throws: AtriumClientError.self) { _ = try await stranger.apps() }
        #expect(
            try await RemoteLauncher(connection: stranger).launchUri("roman-test://x").status == .deniedByRemoteSystem)
        // Plain TCP where only TLS is taken.
        await #expect(throws: AtriumClientError.self) {
            _ = try await AtriumConnection.connect(to: TLSTests.endpoint(host))
        }

        let device = try await PairingTests.device(host)
        let pairing = Task { try await device.pair(deviceName: "audited", timeout: .seconds(60)) }
        let request = try #require(try await PairingTests.waiting(admin).first)
        _ = try await admin.admin("pairing.accept", ["request": request["request"] ?? 0])
        #expect(try await pairing.value.status == .paired)
        #expect(try await PairingTests.opensEcho(device) == .success)
        let launched = try await RemoteLauncher(connection: device).launchUri("roman-test://secret-token-123")
        #expect(launched.status == .success)
        let identity = try #require(device.clientIdentity)
        _ = try await admin.admin("devices.revoke", ["device": .string(identity)])
        await stranger.close()
        await admin.close()
        #expect(await host.stop() == 0)

        let lines = try String(contentsOf: file, encoding: .utf8).split(separator: "\n")
        let events = try lines.map { line in
            try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String], "\(line)")
        }
        func event(_ name: String, _ match: ([String: String]) -> Bool = { _ in true }) -> [String: String]? {
            events.first { $0["event"] == name && match($0) }
        }
        let strangerIdentity = try #require(stranger.clientIdentity)
        let refused = event("open") { $0["device"] == strangerIdentity }
        #expect(refused?["status"] == "NotAuthorized (7)", "\(events)")
        #expect(refused?["address"] == "127.0.0.1")
        #expect(refused?["package"] == "atrium.examples.echo" && refused?["service"] == "atrium.echo")
        let requested = event("pairing.requested") { $0["device"] == identity }
        #expect(requested?["code"]?.count == 6 && requested?["name"] == "audited" && requested?["committed"] == "true")
        #expect(event("pairing.accepted") { $0["device"] == identity } != nil)
        #expect(event("open") { $0["device"] == identity && $0["status"] == "Success (0)" } != nil)
        let launch = event("launch") { $0["device"] == identity }
        #expect(
            launch?["scheme"] == "roman-test" && launch?["status"] == "Success (1)",
            "RemoteLaunchUriStatus: 1 is Success")
        #expect(!lines.contains { $0.contains("secret-token-123") }, "a launch's URI is not kept")
        #expect(event("device.revoked") { $0["device"] == identity && $0["name"] == "audited" } != nil)
        #expect(event("unpaired.refused") { $0["device"] == strangerIdentity && $0["frame"] == "apps" } != nil)
        #expect(
            event("unpaired.refused") {
                $0["device"] == strangerIdentity && $0["frame"] == "launch" && $0["scheme"] == "roman-test"
            } != nil)
        #expect(event("tls.required") { $0["address"] == "127.0.0.1" } != nil)
        #expect(events.allSatisfy { $0["time"] != nil && $0["event"] != nil })
    }

    /// Strangers who keep sending refused frames write a few aggregated lines, not one each;
    /// each is closed after ``maxRefused`` refusals; and a pairing accepted meanwhile, with the
    /// paired device's open, is written whole.
    @Test func refusalsOfStrangersAreAggregatedAndTheirConnectionsClosed() async throws {
        let file = TLSTests.temporaryFolder("audit-flood").appendingPathExtension("jsonl")
        let host = try await TestHost.start(
            manifests: ClientTests.manifests, arguments: PairingTests.arguments + ["--audit-log", file.path])
        let admin = try await PairingTests.operatorConnection(host)
        let strangers = 4
        let maxRefused = 32
        var closedWithReason = 0
        let clock = ContinuousClock()
        let floodStarted = clock.now
        for _ in 0..<strangers {
            let stranger = try await PairingTests.device(host)
            var refused = 0
            // Bounded: the host closes the connection at the limit; 3 more tries than that.
            for _ in 0..<(maxRefused + 4) {
                do {
                    _ = try await stranger.apps(timeout: .seconds(10))
                } catch let error as AtriumClientError {
                    refused += 1
                    if error.message.contains("\(maxRefused) frames refused") {
                        closedWithReason += 1
                        break
                    }
                }
            }
            // One more refused than the limit, each answered; the call after learns why the
            // connection closed.
            #expect(refused == maxRefused + 2, "\(refused) calls failed before the host closed the connection")
            await stranger.close()
        }
        #expect(closedWithReason == strangers)
        // The flood spans this many of the host's 10 s intervals (more on a slow machine):
        // each writes at most the first refusal and one count.
        let intervals = logIntervals(since: floodStarted)

        let device = try await PairingTests.device(host)
        let pairing = Task { try await device.pair(deviceName: "kept", timeout: .seconds(60)) }
        let request = try #require(try await PairingTests.waiting(admin).first)
        _ = try await admin.admin("pairing.accept", ["request": request["request"] ?? 0])
        #expect(try await pairing.value.status == .paired)
        #expect(try await PairingTests.opensEcho(device) == .success)
        let identity = try #require(device.clientIdentity)
        await device.close()
        await admin.close()
        #expect(await host.stop() == 0)

        let events = try String(contentsOf: file, encoding: .utf8).split(separator: "\n").map { line in
            try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String], "\(line)")
        }
        let refusals = events.filter { $0["event"] == "unpaired.refused" }
        // Every refusal is counted, in a line of its own only for the first of an interval.
        let counted = refusals.map { line in
            if let count = line["count"] { return Int(count) ?? 0 }  // the count of an interval
            return 1 + (Int(line["more since last written"] ?? "0") ?? 0)  // one written at once
        }
        #expect(counted.reduce(0, +) == strangers * (maxRefused + 1), "\(refusals)")
        #expect(
            refusals.count <= 2 * intervals,
            "\(refusals.count) lines for \(strangers * (maxRefused + 1)) refusals in \(intervals) intervals")
        // Within one interval the refusals after the first are written as one count when the
        // interval ends (at the latest as the host stops); a flood over several intervals may
        // carry them instead on the next interval's first line ("more since last written").
        if intervals == 1 {
            #expect(refusals.contains { $0["aggregated"] == "true" && $0["frame"] == "apps" })
        } else {
            #expect(
                refusals.contains {
                    ($0["aggregated"] == "true" || $0["more since last written"] != nil) && $0["frame"] == "apps"
                })
        }
        #expect(events.contains { $0["event"] == "pairing.requested" && $0["device"] == identity })
        #expect(events.contains { $0["event"] == "pairing.accepted" && $0["device"] == identity })
        #expect(events.contains { $0["event"] == "open" && $0["device"] == identity && $0["status"] == "Success (0)" })
        #expect(!events.contains { $0["event"] == "audit.dropped" })
    }
}
