import AtriumHost
import Foundation
import Testing

/// A service's `access` in its manifest (CONTRACT section 7): local only, paired devices,
/// named devices, or any client.
struct AccessManifestTests {
    func manifest(_ services: String) throws(ManifestError) -> Manifest {
        let json = """
            { "manifestVersion": 1, "package": "p.q", "library": "libX.so", "services": [\(services)] }
            """
        return try Manifest(json: Data(json.utf8), file: URL(fileURLWithPath: "/m/test.json"))
    }

    func problem(_ services: String) -> String? {
        do {
            _ = try manifest(services)
            return nil
        } catch {
            return error.description
        }
    }

    @Test func eachKindOfAccessAndItsDefaults() throws {
        let all = String(repeating: "f", count: 64)
        let parsed = try manifest(
            """
            { "name": "a", "access": "local" }, { "name": "b", "access": "paired" },
            { "name": "c", "access": { "devices": ["0123abcd", "\(all)"] } },
            { "name": "d", "access": "any" }, { "name": "e", "supportsRemoteSystems": true }, { "name": "f" }
            """)
        #expect(
            parsed.services.map(\.access) == [.local, .paired, .devices(["0123abcd", all]), .any, .paired, .local])
        #expect(parsed.services.map(\.supportsRemoteSystems) == [false, true, true, true, true, false])
    }

    @Test func mistakesAreNamed() {
        let kinds = #"must be "local", "paired", "any" or {"devices": [identities]}"#
        #expect(problem(#"{ "name": "a", "access": "everyone" }"#)?.contains("services[0].access: \(kinds)") == true)
        #expect(problem(#"{ "name": "a", "access": 1 }"#)?.contains(kinds) == true)
        #expect(
            problem(#"{ "name": "a", "access": { "devices": ["Ana's phone"] } }"#)?.contains(
                "services[0].access.devices[0]: must be a device's identity") == true)
        #expect(problem(#"{ "name": "a", "access": { "devices": ["0123"] } }"#) != nil, "under 8 digits")
        #expect(problem(#"{ "name": "a", "access": { "devices": [] } }"#)?.contains("names no device") == true)
        #expect(
            problem(#"{ "name": "a", "supportsRemoteSystems": false, "access": "any" }"#)?.contains(
                "but supportsRemoteSystems is false") == true)
    }
}
