import AtriumHost
import Foundation
import Testing

/// Manifest validation: every rule names the file, the field and what to write instead.
struct ManifestTests {
    func parse(_ json: String) throws(ManifestError) -> Manifest {
        try Manifest(json: Data(json.utf8), file: URL(fileURLWithPath: "/m/test.json"))
    }

    func problem(_ json: String) -> String? {
        do {
            _ = try parse(json)
            return nil
        } catch {
            return error.description
        }
    }

    @Test func aFullManifest() throws {
        let manifest = try parse(
            """
            { "manifestVersion": 1, "package": "a.b", "displayName": "A", "library": "libA.so",
              "services": [{"name": "s1", "supportsRemoteSystems": true}, {"name": "s2"}],
              "schemes": ["My-App", "x+y.z"], "config": {"k": [1, 2]}, "concurrent": true }
            """
        )
        #expect(manifest.package == "a.b" && manifest.displayName == "A" && manifest.library == "libA.so")
        #expect(manifest.services.map(\.supportsRemoteSystems) == [true, false])
        #expect(manifest.schemes == ["my-app", "x+y.z"])
        #expect(manifest.configJSON == #"{"k":[1,2]}"#)
        #expect(manifest.concurrent)
    }

    @Test(arguments: [
        (#"{"package": "a", "library": "l"}"#, "test.json: manifestVersion: is missing"),
        (#"{"manifestVersion": 2, "package": "a"}"#, "test.json: manifestVersion: must be 1, not 2"),
        (#"{"manifestVersion": 1, "package": 5}"#, "test.json: package: must be a string, not 5"),
        (#"{"manifestVersion": 1, "package": ""}"#, "test.json: package: must not be empty"),
        (
            #"{"manifestVersion": 1, "package": "a", "services": [{"name": "s"}]}"#,
            "test.json: library: is missing: a package with services needs a plugin library"
        ),
        (
            #"{"manifestVersion": 1, "package": "a", "library": "l", "services": [{"name": "s"}, {"name": "s"}]}"#,
            #"test.json: services[1].name: "s" is declared twice in this package"#
        ),
        (
            #"{"manifestVersion": 1, "package": "a", "library": "l", "services": [{"name": "s", "supportsRemoteSystems": "yes"}]}"#,
            #"test.json: services[0].supportsRemoteSystems: must be true or false, not the string "yes""#
        ),
        (
            #"{"manifestVersion": 1, "package": "a", "schemes": ["1x"]}"#,
            #"test.json: schemes[0]: "1x" is not a URI scheme (RFC 3986: a letter, then letters, digits, +, - or .)"#
        ),
        (
            #"{"manifestVersion": 1, "package": "a", "config": [1]}"#,
            "test.json: config: must be a JSON object, not an array"
        ),
        (
            #"{"manifestVersion": 1, "package": "a", "launch": {"exec": []}, "schemes": ["x"]}"#,
            "test.json: launch.exec: must be a non-empty array: the program, then its arguments, with {uri} where the URI goes"
        ),
        (
            #"{"manifestVersion": 1, "package": "a", "launch": {"exec": ["/bin/x"]}}"#,
            "test.json: launch: needs schemes to handle"
        ),
        (
            #"{"manifestVersion": 1, "package": "a", "library": "l", "schemes": ["x"], "launch": {"exec": ["/bin/x"]}}"#,
            "test.json: launch: a package with a library handles launches in its plugin; launch.exec is for packages without one"
        ),
        (
            #"{"manifestVersion": 1, "package": "a", "schemes": ["x"], "launch": {"exec": ["/bin/x"], "timeoutSeconds": 0}}"#,
            "test.json: launch.timeoutSeconds: must be a number of seconds above 0 and at most 3600"
        ),
        ("[1]", "test.json: must hold a JSON object"),
    ])
    func refusals(_ json: String, _ expected: String) {
        #expect(problem(json) == expected)
    }

    @Test func launchOnlyPackages() throws {
        let manifest = try parse(
            #"{"manifestVersion": 1, "package": "links", "schemes": ["https"], "launch": {"exec": ["xdg-open", "{uri}"], "wait": true, "timeoutSeconds": 5}}"#
        )
        #expect(manifest.services.isEmpty && manifest.library == nil)
        #expect(manifest.launch == ExecLauncher(command: ["xdg-open", "{uri}"], wait: true, timeoutSeconds: 5))
    }
}
