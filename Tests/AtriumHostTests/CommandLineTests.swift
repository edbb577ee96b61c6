import AtriumProtocol
import AtriumTesting
import Foundation
import Testing

/// `atriumd` as a person runs it: `--help`, `--check`, and refusing bad options with advice.
struct CommandLineTests {
    func run(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        let result = try await runProgram(TestHost.buildFolder.appendingPathComponent("atriumd").path, arguments)
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

    @Test func helpDescribesEveryOption() async throws {
        let (status, output) = try await run(["--help"])
        #expect(status == 0)
        for option in [
            "--manifests", "--listen", "--socket", "--plugin-path", "--log-level", "--check", "--response-timeout",
            "Examples:",
        ] {
            #expect(output.contains(option), "\(option) is in --help")
        }
    }

    /// Every command's help, as a pipe gets it (80 columns), with no example broken in two and
    /// no paragraph left in fragments by lines written wider than that.
    @Test(arguments: ["", "token", "token create", "token list", "token revoke"])
    func helpFitsEightyColumns(_ command: String) async throws {
        let help = try await helpAtEightyColumns("atriumd", command)
        #expect(help.status == 0)
        #expect(help.output.contains("USAGE:"), "\(help.output)")
        #expect(helpLayoutProblems(help.output) == [], "atriumd \(command) --help")
    }

    @Test func versionIsTheRelease() async throws {
        let version = try await run(["--version"])
        #expect(version.status == 0 && version.output == AtriumVersion.current + "\n", "\(version.output)")
        // Every executable says it, the benchmark tools too, and what they are for.
        for tool in ["atrium", "atrium-baseline", "atrium-codec-bench", "atrium-ffi-bench"] {
            let path = TestHost.buildFolder.appendingPathComponent(tool).path
            let answer = try await runProgram(path, ["--version"])
            #expect(answer.status == 0 && answer.output == AtriumVersion.current + "\n", "\(tool): \(answer.output)")
            let help = try await runProgram(path, ["--help"])
            #expect(help.status == 0 && help.output.contains(tool), "\(tool): \(help.output)")
        }
        let wrong = try await runProgram(
            TestHost.buildFolder.appendingPathComponent("atrium-baseline").path, ["--prot"])
        #expect(wrong.status == 64 && wrong.output.contains("unknown option --prot"), "\(wrong.output)")
    }

    @Test func checkPassesTheReferenceManifests() async throws {
        let manifests = try folder(Fixtures.referenceManifests)
        defer { try? FileManager.default.removeItem(at: manifests) }
        let (status, output) = try await run(["--check", "--manifests", manifests.path])
        #expect(status == 0, "\(output)")
        #expect(output.contains("✓ echo.json (atrium.examples.echo): services: atrium.echo; library: "))
        #expect(output.contains("4 manifests, 4 would load, 0 would not"))
    }

    @Test func checkNamesEveryProblemAndExitsOne() async throws {
        var manifests = Fixtures.referenceManifests
        // Every mistake of a manifest, each with its line, and every key this host does not
        // know, at every level, with the key it is likely a slip for: beside the failures.
        manifests["bad.json"] = """
            {
              "manifestVersion": 2,
              "package": "notes",
              "library": "libnotes.so",
              "services": [
                { "name": "notes", "supportRemoteSystem": true },
                { "name": "bad name", "access": "everyone" }
              ],
              "schemes": ["notes", "1bad"],
              "isolation": "process",
              "limits": { "memoryMb": 128 },
              "dispalyName": "Notes"
            }
            """
        manifests["lonely.json"] = #"{"manifestVersion": 1, "package": "lonely", "library": "libx.so", "service": []}"#
        manifests["missing.json"] =
            #"{"manifestVersion": 1, "package": "m", "library": "libNope.so", "services": [{"name": "s"}]}"#
        let folder = try folder(manifests)
        defer { try? FileManager.default.removeItem(at: folder) }
        let (status, output) = try await run(["--check", "--manifests", folder.path])
        #expect(status == 1)
        let expected = [
            "✗ bad.json: line 2: manifestVersion: must be 1, not 2",
            #"  ✗ line 7: services[1].name: "bad name" holds " ": only letters, digits, '.', '_' and '-' are allowed"#,
            #"  ✗ line 7: services[1].access: must be "local", "paired", "any" or {"devices": [identities]}"#,
            "  ✗ line 9: schemes[1]: \"1bad\" is not a URI scheme (RFC 3986: a letter, then letters, digits, +, - or .)",
            #"  ✗ line 11: limits.memoryMb: is not a limit; the limits are memoryMB, openFiles and cpuSeconds; did you mean "memoryMB"?"#,
            #"  ! line 6: services[0].supportRemoteSystem: is not a key this host knows, and is ignored; did you mean "supportsRemoteSystems"?"#,
            #"  ! line 12: dispalyName: is not a key this host knows, and is ignored; did you mean "displayName"?"#,
        ]
        let lonely = [
            "✗ lonely.json: services: is missing: the package has a library but declares nothing for it to serve (services, schemes or functions)",
            #"  ! line 1: service: is not a key this host knows, and is ignored; did you mean "services"?"#,
        ]
        #expect(output.contains(expected.joined(separator: "\n")), "\(output)")
        #expect(output.contains(lonely.joined(separator: "\n")), "\(output)")
        #expect(output.contains("✗ missing.json (m): library libNope.so not found"))
        #expect(output.contains("7 manifests, 4 would load, 3 would not"))
    }

    @Test func badOptionsSayWhatToTypeInstead() async throws {
        let (status, output) = try await run(["--listen", "localhost"])
        #expect(status != 0)
        #expect(
            output.contains(
                "--listen takes HOST:PORT (for example 127.0.0.1:7340 or 0.0.0.0:0), or 'off'; got 'localhost'"))
        let missing = try await run(["--manifests", "/no/such/folder", "--socket", "off", "--listen", "127.0.0.1:0"])
        #expect(missing.status != 0)
        #expect(missing.output.contains("/no/such/folder: cannot read the manifests folder: No such file or directory"))
        // The system's reason, for a file where a folder should be and for a link to itself.
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent(
            "atrium-notdir-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let file = scratch.appendingPathComponent("file")
        try Data().write(to: file)
        let loop = scratch.appendingPathComponent("loop")
        #expect(symlink(loop.path, loop.path) == 0)
        for (folder, reason) in [(file, "Not a directory"), (loop, "Too many levels of symbolic links")] {
            let refused = try await run(["--manifests", folder.path, "--socket", "off", "--listen", "127.0.0.1:0"])
            #expect(refused.status != 0)
            #expect(
                refused.output.contains("\(folder.path): cannot read the manifests folder: \(reason)"),
                "\(refused.output)")
        }
    }

    @Test func securityOptionsThatCannotWorkAreRefusedWithTheReason() async throws {
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
            let (status, output) = try await run(
                arguments + ["--socket", "off", "--listen", "127.0.0.1:0", "--state-dir", scratch.path])
            #expect(status != 0, "\(arguments)")
            #expect(output.contains(reason), "\(arguments): \(output)")
        }
    }

    @Test func badLimitsAndTokenFilesAreRefusedWithTheReason() async throws {
        let refusals: [([String], String)] = [
            (["--max-connections", "0"], "--max-connections takes a positive number; got 0"),
            (["--max-message-values=-5"], "--max-message-values takes a positive number; got -5"),
            (["--idle-timeout", "inf"], "--idle-timeout takes a number of seconds up to a week; got inf"),
            (["--hello-timeout", "0"], "--hello-timeout and --idle-timeout take a positive number of seconds"),
            (["--no-load"], "--no-load goes with --check"),
            (["--token-file", "/no/such/tokens"], "--token-file /no/such/tokens: cannot read it"),
            (["--transfer-window", "0"], "--transfer-window takes a positive number; got 0"),
            (["--transfers-per-caller=-1"], "--transfers-per-caller takes a positive number; got -1"),
            (["--transfer-free-space=-1"], "--transfer-free-space takes 0 or more bytes; got -1"),
            (["--transfer-expiry", "nan"], "--transfer-expiry takes seconds above 0 (at most ten years); got nan"),
            (["--transfer-retention", "1e12"], "--transfer-retention takes seconds above 0 (at most ten years)"),
        ]
        for (arguments, reason) in refusals {
            let (status, output) = try await run(arguments + ["--socket", "off", "--listen", "127.0.0.1:0"])
            #expect(status != 0, "\(arguments)")
            #expect(output.contains(reason), "\(arguments): \(output)")
        }
        let tokens = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-tokens-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: tokens) }
        for (text, reason) in [
            ("# only a comment\n", "holds no tokens"), ("short\n", "a token of 5 characters is too easy to guess"),
        ] {
            try text.write(to: tokens, atomically: true, encoding: .utf8)
            let (status, output) = try await run([
                "--token-file", tokens.path, "--socket", "off", "--listen", "127.0.0.1:0",
            ])
            #expect(status != 0 && output.contains(reason), "\(output)")
        }
    }

    func configFile(_ text: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("atriumd-\(UUID().uuidString).conf")
            .path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// The configuration lines of --print-config, without where each came from.
    func settings(_ printed: String) -> [String] {
        printed.split(separator: "\n").filter { !$0.hasPrefix("#") }.map {
            String($0.split(separator: "#").first ?? "").trimmingCharacters(in: .whitespaces)
        }
    }

    @Test func printConfigSaysWhereEachValueCameFromAsAFileThatGivesTheSame() async throws {
        let manifests = try folder(Fixtures.referenceManifests)
        let path = try configFile(
            """
            # the host of the kitchen
            listen = "127.0.0.1:0"
            manifests = ["\(manifests.path)"]
            response-timeout = 60
            no-watch = true
            advertise-name = "007"
            """)
        defer {
            try? FileManager.default.removeItem(at: manifests)
            try? FileManager.default.removeItem(atPath: path)
        }
        let result = try await runProgram(
            TestHost.buildFolder.appendingPathComponent("atriumd").path,
            ["--print-config", "--drain-timeout", "3"],
            environment: ["ATRIUM_CONFIG": path, "ATRIUM_LOG_LEVEL": "debug", "ATRIUM_SERVER": "x"])
        #expect(result.status == 0, "\(result.output)")
        let lines = result.output.split(separator: "\n").map(String.init)
        for expected in [
            "# configuration file: \(path)",
            "# ATRIUM_SERVER names no option of atriumd's and is not used",
            "listen = \"127.0.0.1:0\" # \(path), line 2",
            "manifests = [\"\(manifests.path)\"] # \(path), line 3",
            "response-timeout = 60 # \(path), line 4",
            "no-watch = true # \(path), line 5",
            "log-level = \"debug\" # environment ATRIUM_LOG_LEVEL",
            "drain-timeout = 3 # command line",
            "tls = \"auto\" # default",
            "advertise-name = \"007\" # \(path), line 6",
            "# audit-log is not set",
        ] {
            #expect(lines.contains(expected), "\(expected) in \(result.output)")
        }
        // Defaults that depend on the machine are shown as they are, not as nothing.
        let standard = try await run(["--config", "off", "--print-config"])
        #expect(
            standard.output.contains(
                "manifests = [\"/etc/atrium/manifests.d\", \"/usr/share/atrium/manifests\""), "\(standard.output)")
        #expect(standard.output.contains("state-dir = \""), "\(standard.output)")
        // What it prints is a configuration file that gives the same configuration.
        let printed = try configFile(result.output)
        defer { try? FileManager.default.removeItem(atPath: printed) }
        let again = try await run(["--config", printed, "--print-config"])
        #expect(again.status == 0, "\(again.output)")
        #expect(settings(again.output) == settings(result.output))
        // And the host runs with it: the file's manifests are the ones checked.
        let check = try await run(["--config", path, "--check", "--no-load"])
        #expect(check.status == 0 && check.output.contains("4 manifests, 4 would load, 0 would not"), "\(check.output)")
    }

    @Test func aHostTakesItsLimitsFromTheFileAndTheEnvironment() async throws {
        let path = try configFile("max-channels = 3\nmax-in-flight = 5 # fewer\n")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let host = try await TestHost.start(
            manifests: Fixtures.referenceManifests,
            environment: ["ATRIUM_CONFIG": path, "ATRIUM_MAX_IN_FLIGHT": "9"])
        let client = try await TestClient.connect(port: host.port)
        let welcome = try await client.hello()
        await client.close()
        _ = await host.stop()
        #expect(welcome.limits.maxChannels == 3)
        #expect(welcome.limits.maxInFlight == 9)
    }

    @Test func mistakesInTheConfigurationNameTheFileTheLineAndTheKey() async throws {
        let cases: [(String, String)] = [
            (
                "listen = \"127.0.0.1:0\"\nlog-levle = \"debug\"",
                "line 2, key 'log-levle': no such option; did you mean 'log-level'?"
            ),
            ("no-watch = 1", "line 1, key 'no-watch': takes true or false; got a whole number (1)"),
            ("\n\nlisten = 127.0.0.1", "line 3, key 'listen': '127.0.0.1' is not a value: a string is quoted"),
            ("[server]\nlisten = \"x\"", "line 1: tables ([name]) are not used"),
        ]
        for (text, expected) in cases {
            let path = try configFile(text)
            defer { try? FileManager.default.removeItem(atPath: path) }
            let result = try await run(["--config", path, "--check"])
            #expect(result.status == 64, "\(result.output)")
            #expect(result.output.contains("Error: \(path), \(expected)"), "\(result.output)")
        }
        // A value the file gives that the option refuses: the option's own message, and where
        // the value came from.
        let path = try configFile("# a comment\nlisten = \"kitchen\"")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let refused = try await run(["--config", path, "--check"])
        #expect(refused.status == 64)
        #expect(refused.output.contains("--listen takes HOST:PORT"), "\(refused.output)")
        #expect(refused.output.contains("(--listen is set by \(path), line 2)"), "\(refused.output)")
        // Right under the error, before the usage.
        let lines = refused.output.split(separator: "\n").map(String.init)
        let error = try #require(lines.firstIndex { $0.hasPrefix("Error:") }, "\(refused.output)")
        #expect(lines.indices.contains(error + 1) && lines[error + 1] == "(--listen is set by \(path), line 2)")
        let environment = try await runProgram(
            TestHost.buildFolder.appendingPathComponent("atriumd").path, ["--check"],
            environment: ["ATRIUM_MAX_CHANNELS": "many"])
        #expect(environment.status == 64)
        #expect(
            environment.output.contains("(--max-channels is set by environment ATRIUM_MAX_CHANNELS)"),
            "\(environment.output)")
        let missing = try await run(["--config", "/no/such/atriumd.conf"])
        #expect(missing.status == 64)
        #expect(missing.output.contains("the configuration file /no/such/atriumd.conf does not exist"))
    }

    @Test func tokenCommandsTakeTheStateFolderFromTheFile() async throws {
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-state-\(UUID().uuidString)")
        try FileManager.default.createDirectory(
            at: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let path = try configFile("state-dir = \"\(state.path)\"\nlisten = \"0.0.0.0:7340\"\n")
        defer {
            try? FileManager.default.removeItem(at: state)
            try? FileManager.default.removeItem(atPath: path)
        }
        let made = try await run(["token", "create", "--name", "backup", "--config", path])
        #expect(made.status == 0, "\(made.output)")
        #expect(FileManager.default.fileExists(atPath: state.appendingPathComponent("tokens.json").path))
        let listed = try await runProgram(
            TestHost.buildFolder.appendingPathComponent("atriumd").path, ["token", "list"],
            environment: ["ATRIUM_CONFIG": path])
        #expect(listed.status == 0 && listed.output.contains("backup"), "\(listed.output)")
        // atriumd's own option before the subcommand, as ArgumentParser takes it.
        let before = try await run(["--config", path, "token", "list"])
        #expect(before.status == 0 && before.output.contains("backup"), "\(before.output)")
        // Help is given however broken the configuration is.
        let help = try await runProgram(
            TestHost.buildFolder.appendingPathComponent("atriumd").path, ["--help"],
            environment: ["ATRIUM_CONFIG": "/no/such/atriumd.conf", "ATRIUM_NO_WATCH": "maybe"])
        #expect(help.status == 0 && help.output.contains("--print-config"), "\(help.output)")
    }

    @Test(.enabled(if: geteuid() == 0, "needs root: it gives a folder to another user"))
    func rootManagesTheTokensOfAServicesStateFolderForIt() async throws {
        // As `sudo atriumd token create` for the system unit, whose DynamicUser owns the state
        // folder: the file is the service's, so the host can read it.
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-owned-\(UUID().uuidString)")
        try FileManager.default.createDirectory(
            at: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(at: state) }
        #expect(chown(state.path, 65534, 65534) == 0)
        let made = try await run(["token", "create", "--name", "backup", "--state-dir", state.path])
        #expect(made.status == 0, "\(made.output)")
        let file = state.appendingPathComponent("tokens.json").path
        let attributes = try FileManager.default.attributesOfItem(atPath: file)
        #expect((attributes[.ownerAccountID] as? NSNumber)?.intValue == 65534)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        let listed = try await run(["token", "list", "--state-dir", state.path])
        #expect(listed.status == 0 && listed.output.contains("backup"), "\(listed.output)")
        let revoked = try await run(["token", "revoke", "backup", "--state-dir", state.path])
        #expect(revoked.status == 0, "\(revoked.output)")
        let after = try FileManager.default.attributesOfItem(atPath: file)
        #expect((after[.ownerAccountID] as? NSNumber)?.intValue == 65534)
    }

    @Test func severalManifestFoldersAreCheckedInOrder() async throws {
        let first = try folder(["echo.json": Fixtures.referenceManifests["echo.json"]!])
        let second = try folder(Fixtures.referenceManifests)
        defer {
            try? FileManager.default.removeItem(at: first)
            try? FileManager.default.removeItem(at: second)
        }
        let result = try await run(["--check", "--no-load", "--manifests", first.path, "--manifests", second.path])
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.contains("manifests from \(first.path), \(second.path)"))
        #expect(result.output.contains("✓ \(first.path)/echo.json (atrium.examples.echo)"), "\(result.output)")
        #expect(
            result.output.contains("- \(second.path)/echo.json is not read: \(first.path)/echo.json takes its place"))
        #expect(result.output.contains("4 manifests, 4 would load, 0 would not"))
    }
}
