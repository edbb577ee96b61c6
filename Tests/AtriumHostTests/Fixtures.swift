import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

enum Fixtures {
    static let romanPackage = "5085ShawnHenry.RomanTestApp_jsjw7knzsgcce"
    static let romanService = "com.microsoft.test.cdppingpongservice"
    static let echoPackage = "atrium.examples.echo"
    static let echoService = "atrium.echo"
    static let testPackage = "atrium.tests.service"

    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The repository's own reference manifests.
    static var referenceManifests: [String: String] {
        let folder = repositoryRoot.appendingPathComponent("manifests")
        var manifests: [String: String] = [:]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        where name.hasSuffix(".json") {
            manifests[name] = try? String(contentsOf: folder.appendingPathComponent(name), encoding: .utf8)
        }
        return manifests
    }

    /// The reference manifests, the test service (a remote service, a local-only one and
    /// refusing ones), and a package whose library does not exist.
    static var all: [String: String] {
        referenceManifests.merging([
            "test-service.json": """
            {
              "manifestVersion": 1,
              "package": "\(testPackage)",
              "displayName": "Test Service",
              "library": "libAtriumTestService.so",
              "services": [
                { "name": "test", "supportsRemoteSystems": true },
                { "name": "local.only" },
                { "name": "refuse.7", "supportsRemoteSystems": true },
                { "name": "refuse.-1", "supportsRemoteSystems": true },
                { "name": "refuse.4294967296", "supportsRemoteSystems": true }
              ],
              "schemes": ["atrium-test"],
              "config": { "greeting": "hi" }
            }
            """,
            "missing-library.json": """
            { "manifestVersion": 1, "package": "atrium.tests.missing", "library": "libDoesNotExist.so",
              "services": [{ "name": "nothing", "supportsRemoteSystems": true }] }
            """,
        ]) { $1 }
    }
}

/// A host with every fixture, and a client that has said hello.
func startHost(arguments: [String] = [], manifests: [String: String] = Fixtures.all) async throws -> TestHost {
    try await TestHost.start(manifests: manifests, arguments: arguments)
}

func connectedClient(_ host: TestHost, clientId: String = "test-client") async throws -> TestClient {
    let client = try await TestClient.connect(port: host.port)
    try await client.hello(clientId: clientId)
    return client
}

extension ResponseFrame {
    /// The answer's message, decoded.
    var decoded: ValueSet {
        get throws { try message.decode() }
    }
}
