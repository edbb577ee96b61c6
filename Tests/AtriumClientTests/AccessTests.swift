import AtriumClient
import AtriumProtocol
import AtriumTLS
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// Access per service, checked on open against a real atriumd that requires pairing: local
/// only, paired devices, named devices, any client.
@Suite(.serialized)
struct AccessTests {
    @Test func eachServiceTakesTheCallersItsManifestNames() async throws {
        let mineFolder = TLSTests.temporaryFolder("mine")
        let mine = try ClientTLS.defaultIdentity(in: mineFolder).fingerprint
        var manifests = ClientTests.manifests
        manifests["access.json"] = """
            { "manifestVersion": 1, "package": "atrium.tests.access", "library": "libAtriumTestService.so",
              "services": [{ "name": "local", "access": "local", "commands": [{ "command": "a" }] },
                           { "name": "paired", "access": "paired", "commands": [{ "command": "a" }] },
                           { "name": "mine", "access": { "devices": ["\(mine.prefix(12))"] }, "commands": [{ "command": "a" }] },
                           { "name": "open", "access": "any", "commands": [{ "command": "a" }] }] }
            """
        let host = try await TestHost.start(manifests: manifests, arguments: PairingTests.arguments)
        let admin = try await PairingTests.operatorConnection(host)
        func opens(_ connection: AtriumConnection, _ service: String) async throws -> AppServiceConnectionStatus {
            try await AppServiceConnection(
                appServiceName: service, packageId: "atrium.tests.access", connection: connection
            ).openRemote()
        }
        func pairs(_ connection: AtriumConnection) async throws {
            let pairing = Task { try await connection.pair(deviceName: "d", timeout: .seconds(60)) }
            let request = try #require(try await PairingTests.waiting(admin).first)
            _ = try await admin.admin("pairing.accept", ["request": request["request"] ?? 0])
            #expect(try await pairing.value.status == .paired)
        }

        let device = try await PairingTests.device(host, identity: mineFolder)
        #expect(try await opens(device, "open") == .success, "any: even unpaired")
        #expect(try await opens(device, "paired") == .notAuthorized)
        #expect(try await opens(device, "mine") == .notAuthorized, "named, but not paired yet")
        #expect(try await opens(device, "local") == .remoteSystemNotSupportedByApp)
        try await pairs(device)
        #expect(try await opens(device, "paired") == .success)
        #expect(try await opens(device, "mine") == .success)
        #expect(try await opens(device, "local") == .remoteSystemNotSupportedByApp)

        let other = try await PairingTests.device(host)
        try await pairs(other)
        #expect(try await opens(other, "paired") == .success)
        #expect(try await opens(other, "mine") == .notAuthorized, "paired, but not named")
        // What each service takes is told only to the callers that may open it.
        let described = { (connection: AtriumConnection) in
            try await connection.app("atrium.tests.access")?.interfaces.keys.sorted()
        }
        #expect(try await described(device) == ["mine", "open", "paired"])
        #expect(try await described(other) == ["open", "paired"])
        #expect(try await described(admin) == ["local", "mine", "open", "paired"])
        // The first refusal of its kind is logged whole (later ones within 10 s are counted):
        // the device's identity, its address, the package and the service.
        #expect(await host.waitForLog("open not authorized"))
        let refusal = host.log.split(separator: "\n").first { $0.contains("open not authorized") }
        #expect(refusal?.contains("device=\(mine)") == true, "\(refusal ?? "")")
        #expect(refusal?.contains("atrium.tests.access/paired refused") == true, "\(refusal ?? "")")
        #expect(refusal?.contains("address=127.0.0.1") == true, "\(refusal ?? "")")

        for service in ["local", "paired", "mine", "open"] {
            #expect(try await opens(admin, service) == .success, "a local client may open \(service)")
        }
        await device.close()
        await other.close()
        await admin.close()
        #expect(await host.stop() == 0)
    }
}
