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
            // The file and the rule; lines are tested apart (every one of these is on line 1).
            return "\(error.file): \(error.detail)"
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
        #expect(manifest.isolation == .inProcess)
    }

    @Test func aWorkerManifest() throws {
        let manifest = try parse(
            """
            { "manifestVersion": 1, "package": "a.b", "library": "libA.so", "services": [{"name": "s"}], "isolation": "process",
              "limits": {"memoryMB": 256, "openFiles": 64, "cpuSeconds": 3600}, "user": "atrium-plugins" }
            """
        )
        #expect(manifest.isolation == .process)
        #expect(manifest.workerLimits == Manifest.WorkerLimits(memoryMB: 256, openFiles: 64, cpuSeconds: 3600))
        #expect(manifest.workerUser == "atrium-plugins")
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
        (
            #"{"manifestVersion": 1, "package": "a", "library": "l", "services": [{"name": "s"}], "isolation": "sandbox"}"#,
            #"test.json: isolation: must be "inProcess" or "process", not the string "sandbox""#
        ),
        (
            #"{"manifestVersion": 1, "package": "a", "library": "l", "services": [{"name": "s"}], "limits": {"memoryMB": 64}}"#,
            #"test.json: limits: apply to a worker process: they need "isolation": "process""#
        ),
        (
            #"{"manifestVersion": 1, "package": "a", "library": "l", "services": [{"name": "s"}], "isolation": "process", "limits": {"memoryMB": 1.5}}"#,
            "test.json: limits.memoryMB: must be a whole number from 1 to 1000000"
        ),
        (
            #"{"manifestVersion": 1, "package": "a", "library": "l", "services": [{"name": "s"}], "isolation": "process", "limits": {"threads": 4}}"#,
            "test.json: limits.threads: is not a limit; the limits are memoryMB, openFiles and cpuSeconds"
        ),
        (
            #"{"manifestVersion": 1, "package": "a", "library": "l", "services": [{"name": "s"}], "isolation": "process", "limits": {"memoryMB": 8}}"#,
            "test.json: limits.memoryMB: must be at least 64: a worker needs that much address space to start"
        ),
        (
            #"{"manifestVersion": 1, "package": "a", "library": "l", "services": [{"name": "s"}], "user": "nobody"}"#,
            #"test.json: user: is the user a worker process runs as: it needs "isolation": "process""#
        ),
        (
            #"{"manifestVersion": 1, "package": "a", "library": "l", "services": [{"name": "s"}], "isolation": "process", "user": "a b"}"#,
            #"test.json: user: must be a user name (letters, digits, _ - and ., at most 32), not the string "a b""#
        ),
        (
            #"{"manifestVersion": 1, "package": "a", "schemes": ["x"], "launch": {"exec": ["/bin/x"]}, "isolation": "process"}"#,
            #"test.json: isolation: "process" is for packages with a plugin library (not declared functions)"#
        ),
    ])
    func refusals(_ json: String, _ expected: String) {
        #expect(problem(json) == expected)
    }

    func check(_ json: String) -> ManifestReport {
        Manifest.check(json: Data(json.utf8), file: URL(fileURLWithPath: "/m/test.json"))
    }

    @Test func everyProblemIsReportedWithItsLineAndOneMistakeOnlyOnce() {
        let report = check(
            """
            {
              "manifestVersion": 1, "package": "p", "library": "libp.so",
              "services": [
                {"name": "a", "access": "sometimes"},
                {"supportsRemoteSystems": true},
                {"name": "a", "acess": "any"}
              ],
              "functions": [
                {"command": "one"},
                {"command": "two", "symbol": "two", "params": [{"name": "x", "type": "int32", "lenghtOf": "y"}]},
                {"command": "three", "symbol": "three", "returns": {"type": "string", "free": "free", "owner": "me"}},
                {"command": "one", "symbol": "again"}
              ],
              "isolation": "process"
            }
            """)
        #expect(report.manifest == nil)
        #expect(
            report.errors.map(\.description) == [
                #"test.json:4: services[0].access: must be "local", "paired", "any" or {"devices": [identities]}"#,
                "test.json:5: services[1].name: is missing",
                #"test.json:6: services[2].name: "a" is declared twice in this package"#,
                "test.json:9: functions[0].symbol: must be the C function's name",
                #"test.json:12: functions[3].command: "one" is declared twice"#,
                #"test.json:14: isolation: "process" is for packages with a plugin library (not declared functions)"#,
            ])
        #expect(
            report.warnings.map(\.description) == [
                #"test.json:6: services[2].acess: is not a key this host knows, and is ignored; did you mean "access"?"#,
                #"test.json:10: functions[1].params[0].lenghtOf: is not a key this host knows, and is ignored; did you mean "lengthOf"?"#,
                #"test.json:11: functions[2].returns.owner: is not a key this host knows, and is ignored"#,
            ])
    }

    @Test func warningsDoNotStopAManifestAndAKeyFarFromAnyGetsNoGuess() throws {
        let report = check(
            #"{"manifestVersion": 1, "package": "p", "library": "l", "services": [{"name": "s"}], "launch_": 1, "zzzzzzzzzz": 2}"#
        )
        #expect(report.errors.isEmpty && report.manifest?.package == "p")
        #expect(
            report.warnings.map(\.detail) == [
                #"launch_: is not a key this host knows, and is ignored; did you mean "launch"?"#,
                "zzzzzzzzzz: is not a key this host knows, and is ignored",
            ])
    }

    @Test func aLibraryWithNothingToServeIsRefusedAndAMissingLibraryIsSaidOfWrongServicesToo() {
        for empty in [#""services": []"#, #""services": [], "schemes": []"#, #""service": [{"name": "s"}]"#] {
            let report = check(#"{"manifestVersion": 1, "package": "p", "library": "l", \#(empty)}"#)
            #expect(
                report.errors.map(\.detail) == [
                    "services: is missing: the package has a library but declares nothing for it to serve (services, schemes or functions)"
                ], "\(empty)")
        }
        // A service entry that is wrong is still a service: the missing library is said too.
        let report = check(#"{"manifestVersion": 1, "package": "p", "services": [{"name": 5}]}"#)
        #expect(
            report.errors.map(\.detail) == [
                "services[0].name: must be a string",
                "library: is missing: a package with services needs a plugin library",
            ])
    }

    @Test func hostileTextInAManifestIsEscapedInItsErrors() {
        let report = check(
            #"{"manifestVersion": 1, "package": "a\u001b[31mb\u2028c", "schemes": ["x\ny"], "displayName": "\#(String(repeating: "z", count: 500))"}"#
        )
        let text = report.errors.map(\.description).joined(separator: "\n")
        #expect(
            !text.contains("\u{1B}") && !text.contains("\u{2028}") && text.split(separator: "\n").count == 2, "\(text)")
        #expect(text.contains(#"\u{1B}[31m"#) && text.contains(#"\u{2028}"#) && text.contains(#""x\u{A}y""#), "\(text)")
    }

    @Test func aFloodOfMistakesIsReportedBoundedly() {
        // 5,000 wrong services and 5,000 unknown keys of 100 bytes: each list stops at
        // maxReported and says how many more there were; keys too long to be slips get no guess.
        let services = (0..<5_000).map { _ in #"{"name": 1}"# }.joined(separator: ",")
        let keys = (0..<5_000).map { #""\#(String(repeating: "k", count: 96))\#($0)": 0"# }.joined(separator: ",")
        let report = check(
            #"{"manifestVersion": 1, "package": "p", "library": "l", "services": [\#(services)], \#(keys)}"#)
        #expect(report.errors.count == Manifest.maxReported && report.warnings.count == Manifest.maxReported)
        #expect(report.errors.last?.reason == "and \(5_000 - Manifest.maxReported + 1) more like the above")
        #expect(report.warnings.last?.reason == "and \(5_000 - Manifest.maxReported + 1) more like the above")
        #expect(report.warnings.dropLast().allSatisfy { !$0.reason.contains("did you mean") })
    }

    @Test func launchOnlyPackages() throws {
        let manifest = try parse(
            #"{"manifestVersion": 1, "package": "links", "schemes": ["https"], "launch": {"exec": ["xdg-open", "{uri}"], "wait": true, "timeoutSeconds": 5}}"#
        )
        #expect(manifest.services.isEmpty && manifest.library == nil)
        #expect(manifest.launch == ExecLauncher(command: ["xdg-open", "{uri}"], wait: true, timeoutSeconds: 5))
    }
}

/// The `functions` field (docs/FFI.md).
struct FunctionManifestTests {
    func problem(_ functions: String) -> String? {
        let json = #"{"manifestVersion": 1, "package": "f", "library": "libf.so", "functions": "# + functions + "}"
        do {
            _ = try Manifest(json: Data(json.utf8), file: URL(fileURLWithPath: "/m/f.json"))
            return nil
        } catch {
            return "\(error.file): \(error.detail)"
        }
    }

    @Test(arguments: [
        ("[]", "f.json: functions: must be a non-empty array"),
        (
            #"[{"symbol": "x"}]"#,
            "f.json: functions[0].command: must be a non-empty string: the Command value that calls the function"
        ),
        (
            #"[{"command": "a", "symbol": "x"}, {"command": "a", "symbol": "y"}]"#,
            #"f.json: functions[1].command: "a" is declared twice"#
        ),
        (#"[{"command": "a"}]"#, "f.json: functions[0].symbol: must be the C function's name"),
        (
            #"[{"command": "a", "symbol": "x", "params": [{"name": "p", "type": "int128"}]}]"#,
            "f.json: functions[0].params[0].type: must be one of: int8 int16 int32 int64 uint8 uint16 uint32 uint64 float double bool string bytes"
        ),
        (
            #"[{"command": "a", "symbol": "x", "params": [{"name": "p", "type": "string", "lengthOf": "q"}]}]"#,
            "f.json: functions[0].params[0].lengthOf: needs an integer type, not string"
        ),
        (
            #"[{"command": "a", "symbol": "x", "params": [{"name": "n", "type": "uint32", "lengthOf": "q"}]}]"#,
            #"f.json: functions[0].params: "n" is the lengthOf "q", which is not a bytes parameter of this function"#
        ),
        (
            #"[{"command": "a", "symbol": "x", "returns": "bytes"}]"#,
            "f.json: functions[0].returns: must be one of: int8 int16 int32 int64 uint8 uint16 uint32 uint64 float double bool string void (bytes cannot be returned: their length is unknown)"
        ),
        (
            #"[{"command": "a", "symbol": "x", "returns": {"type": "int32", "free": "free"}}]"#,
            #"f.json: functions[0].returns: an object must be {"type": "string", "free": "FUNCTION"}"#
        ),
    ])
    func refusals(_ functions: String, _ expected: String) {
        #expect(problem(functions) == expected)
    }

    @Test func aManifestOverOneMebibyteIsRefusedUnread() {
        let padded = String(repeating: " ", count: Manifest.maxBytes) + #"{"manifestVersion": 1}"#
        #expect {
            try Manifest(json: Data(padded.utf8), file: URL(fileURLWithPath: "/m/big.json"))
        } throws: { error in
            "\(error)" == "big.json: is \(Manifest.maxBytes + 22) bytes; a manifest may be at most 1048576 (1 MiB)"
        }
    }

    @Test func functionsNeedALibrary() {
        let json = #"{"manifestVersion": 1, "package": "f", "functions": [{"command": "a", "symbol": "x"}]}"#
        #expect(
            throws: ManifestError(
                file: "f.json", field: "functions", reason: "need a library to find the functions in", line: 1)
        ) {
            try Manifest(json: Data(json.utf8), file: URL(fileURLWithPath: "/m/f.json"))
        }
    }
}
