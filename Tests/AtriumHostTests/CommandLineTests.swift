import AtriumProtocol
import AtriumTesting
import Foundation
import Testing

/// `atriumd` as a person runs it: `--help`, `--check`, and refusing bad options with advice.
struct CommandLineTests {
    func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let result = try runProgram(TestHost.buildFolder.appendingPathComponent("atriumd").path, arguments)
        return (result.status, result.output)
    }

    func folder(_ manifests: [String: String]) throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-check-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for (name, json) in manifests {
            try json.write(to: folder.appendingPathComponent(name), atomically: true, encoding: .utf8)
        }
        return folder
    }

    @Test func helpDescribesEveryOption() throws {
        let (status, output) = try run(["--help"])
        #expect(status == 0)
        for option in [
            "--manifests", "--listen", "--socket", "--plugin-path", "--log-level", "--check", "--response-timeout",
            "Examples:",
        ] {
            #expect(output.contains(option), "\(option) is in --help")
        }
    }

    @Test func versionIsTheRelease() throws {
        let version = try run(["--version"])
        #expect(version.status == 0 && version.output == AtriumVersion.current + "\n", "\(version.output)")
    }

    @Test func checkPassesTheReferenceManifests() throws {
        let manifests = try folder(Fixtures.referenceManifests)
        defer { try? FileManager.default.removeItem(at: manifests) }
        let (status, output) = try run(["--check", "--manifests", manifests.path])
        #expect(status == 0, "\(output)")
        #expect(output.contains("✓ echo.json (atrium.examples.echo): services: atrium.echo; library: "))
        #expect(output.contains("3 manifests, 3 would load, 0 would not"))
    }

    @Test func checkNamesEveryProblemAndExitsOne() throws {
        var manifests = Fixtures.referenceManifests
        manifests["bad.json"] = #"{"manifestVersion": 2, "package": "x", "library": "x.so"}"#
        manifests["missing.json"] =
            #"{"manifestVersion": 1, "package": "m", "library": "libNope.so", "services": [{"name": "s"}]}"#
        let folder = try folder(manifests)
        defer { try? FileManager.default.removeItem(at: folder) }
        let (status, output) = try run(["--check", "--manifests", folder.path])
        #expect(status == 1)
        #expect(output.contains("✗ bad.json: manifestVersion: must be 1, not 2"))
        #expect(output.contains("✗ missing.json (m): library libNope.so not found"))
        #expect(output.contains("5 manifests, 3 would load, 2 would not"))
    }

    @Test func badOptionsSayWhatToTypeInstead() throws {
        let (status, output) = try run(["--listen", "localhost"])
        #expect(status != 0)
        #expect(
            output.contains(
                "--listen takes HOST:PORT (for example 127.0.0.1:7340 or 0.0.0.0:0), or 'off'; got 'localhost'"))
        let missing = try run(["--manifests", "/no/such/folder", "--socket", "off", "--listen", "127.0.0.1:0"])
        #expect(missing.status != 0)
        #expect(missing.output.contains("cannot read the manifests folder"))
    }

    @Test func securityOptionsThatCannotWorkAreRefusedWithTheReason() throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-opts-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        // An audit log that is a link is not followed (someone could point it at another file).
        let link = scratch.appendingPathComponent("audit.jsonl")
        try FileManager.default.createSymbolicLink(
            at: link, withDestinationURL: scratch.appendingPathComponent("elsewhere"))
        let refusals: [([String], String)] = [
            (
                ["--socket-group", "no-such-group-atrium"],
                "--socket-group no-such-group-atrium: there is no such group"
            ),
            (["--pairing-timeout=-1"], "--pairing-timeout takes a positive number of seconds"),
            (["--pairing-timeout", "1e9"], "--pairing-timeout takes a number of seconds up to a week"),
            (["--tls", "sometimes"], "sometimes"),
            (["--pairing", "maybe"], "maybe"),
            (["--audit-log", link.path], "cannot open the audit log \(link.path)"),
            (
                ["--audit-log", scratch.appendingPathComponent("no/such/folder/audit.jsonl").path],
                "cannot open the audit log"
            ),
        ]
        for (arguments, reason) in refusals {
            let (status, output) = try run(
                arguments + ["--socket", "off", "--listen", "127.0.0.1:0", "--state-dir", scratch.path])
            #expect(status != 0, "\(arguments)")
            #expect(output.contains(reason), "\(arguments): \(output)")
        }
    }

    @Test func badLimitsAndTokenFilesAreRefusedWithTheReason() throws {
        let refusals: [([String], String)] = [
            (["--max-connections", "0"], "--max-connections takes a positive number; got 0"),
            (["--max-message-values=-5"], "--max-message-values takes a positive number; got -5"),
            (["--idle-timeout", "inf"], "--idle-timeout takes a number of seconds up to a week; got inf"),
            (["--hello-timeout", "0"], "--hello-timeout and --idle-timeout take a positive number of seconds"),
            (["--no-load"], "--no-load goes with --check"),
            (["--token-file", "/no/such/tokens"], "--token-file /no/such/tokens: cannot read it"),
        ]
        for (arguments, reason) in refusals {
            let (status, output) = try run(arguments + ["--socket", "off", "--listen", "127.0.0.1:0"])
            #expect(status != 0, "\(arguments)")
            #expect(output.contains(reason), "\(arguments): \(output)")
        }
        let tokens = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-tokens-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: tokens) }
        for (text, reason) in [
            ("# only a comment\n", "holds no tokens"), ("short\n", "a token of 5 characters is too easy to guess"),
        ] {
            try text.write(to: tokens, atomically: true, encoding: .utf8)
            let (status, output) = try run(["--token-file", tokens.path, "--socket", "off", "--listen", "127.0.0.1:0"])
            #expect(status != 0 && output.contains(reason), "\(output)")
        }
    }
}
