import AtriumClient
import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// Runs the built `atrium` tool, with a state folder (its TLS identity) of the test run's own.
func atrium(_ arguments: [String]) async throws -> ProgramOutput {
    try await runProgram(
        TestHost.buildFolder.appendingPathComponent("atrium").path, arguments,
        environment: ["XDG_STATE_HOME": toolStateHome.path])
}

/// The `atrium` tool's state folder for this test run.
let toolStateHome = FileManager.default.temporaryDirectory.appendingPathComponent(
    "atrium-tool-state-\(UUID().uuidString.prefix(8))")

/// The `atrium` tool as a person runs it, against a real atriumd: output and exit codes.
@Suite(.serialized)
struct CommandLineToolTests {
    @Test func pingAppsAndSend() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests)
        let address = "127.0.0.1:\(host.port)"

        let ping = try await atrium(["ping", address, "-c", "3", "-i", "0"])
        #expect(ping.status == 0, "\(ping.output)")
        #expect(ping.output.contains("pong from \(address): seq=3 time="))
        #expect(ping.output.contains("3 sent, 3 received, 0 lost (0%)"))
        #expect(ping.output.contains("min/p50/p99/max = "))

        let apps = try await atrium(["apps", address])
        #expect(apps.status == 0)
        #expect(apps.output.contains("PACKAGE"))
        let roman = apps.output.split(separator: "\n").first { $0.hasPrefix("5085ShawnHenry") }
        let columns = roman?.components(separatedBy: "  ").map { $0.trimmingCharacters(in: .whitespaces) }.filter {
            !$0.isEmpty
        }
        #expect(
            columns == [
                "5085ShawnHenry.RomanTestApp_jsjw7knzsgcce", "Roman Test App", "ready",
                "com.microsoft.test.cdppingpongservice", "roman-test",
            ])

        let send = try await atrium([
            "send", address, "--package", "atrium.examples.echo", "--service", "atrium.echo", "Type=hello", "Count=3",
            "Ok=true", "Id:=7",
        ])
        let defaultHost = try await atrium([
            "send", "--package", "p", "--service", "s", "Type=hello", "--timeout", "0.5",
        ])
        #expect(
            defaultHost.output.contains("cannot connect to 127.0.0.1:7340") || defaultHost.status != 64,
            "a first KEY=VALUE word is a field, not a host")
        #expect(send.status == 0)
        #expect(
            send.output == "status: Success (0)\n{\"Type\": \"hello\", \"Count\": 3, \"Ok\": true, \"Id\": \"7\"}\n")

        let json = try await atrium([
            "send", address, "--package", "atrium.examples.echo", "--service", "atrium.echo", "--json",
            #"{"Items": [1, 2]}"#, "--json-output",
        ])
        #expect(json.status == 0)
        #expect(json.output.contains(#""statusName": "Success (0)""#))
        #expect(json.output.contains(#""Items": ["#))

        let local = try await atrium(["ping", "unix:\(host.socketPath)", "-c", "1"])
        #expect(local.status == 0, "the local socket works too")
        #expect(await host.stop() == 0)
    }

    /// A package that did not load: `atrium apps` says so (and why, over the local socket), and
    /// `atrium send` prints the host's reason for refusing the open.
    /// `--local` (or HOST `unix:` alone) is the host's local socket where atriumd puts it by
    /// default: under $XDG_RUNTIME_DIR, or /tmp/atrium-UID without it.
    @Test func localNamesTheDefaultSocket() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests)
        let runtime = TLSTests.temporaryFolder("runtime")
        try FileManager.default.createDirectory(
            at: runtime.appendingPathComponent("atrium"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(
            atPath: runtime.appendingPathComponent("atrium/atriumd.sock").path, withDestinationPath: host.socketPath)
        func tool(_ arguments: [String], runtime: String) async throws -> ProgramOutput {
            try await runProgram(
                TestHost.buildFolder.appendingPathComponent("atrium").path, arguments,
                environment: ["XDG_STATE_HOME": toolStateHome.path, "XDG_RUNTIME_DIR": runtime])
        }
        let local = try await tool(["ping", "--local", "-c", "1"], runtime: runtime.path)
        #expect(local.status == 0, "\(local.output)")
        #expect(local.output.contains("PING unix:\(runtime.path)/atrium/atriumd.sock"), "\(local.output)")
        let bare = try await tool(["apps", "unix:"], runtime: runtime.path)
        #expect(bare.status == 0 && bare.output.contains("atrium.examples.echo"), "\(bare.output)")
        let send = try await tool(
            ["send", "--local", "--package", "atrium.examples.echo", "--service", "atrium.echo", "A=1"],
            runtime: runtime.path)
        #expect(send.status == 0, "\(send.output)")
        let both = try await tool(["ping", "--local", "127.0.0.1:7000"], runtime: runtime.path)
        #expect(both.status == 64 && both.output.contains("--local and HOST"), "\(both.output)")
        // Without XDG_RUNTIME_DIR, the folder atriumd uses then.
        let unset = try await tool(["ping", "--local", "-c", "1", "--timeout", "2"], runtime: "")
        #expect(unset.output.contains("/tmp/atrium-\(getuid())/atriumd.sock"), "\(unset.output)")
        #expect(await host.stop() == 0)
    }

    /// `atrium pair` takes a discovered name as HOST, as every command does (none found here:
    /// unreachable, not a usage error), but not with --forget, whose name could be anyone's.
    @Test func pairTakesADiscoveredName() async throws {
        let named = try await atrium(["pair", "No Such Host Here", "--wait", "1"])
        #expect(named.status == 3, "\(named.output)")
        #expect(named.output.contains("no host named \"No Such Host Here\""), "\(named.output)")
        let forgetting = try await atrium(["pair", "No Such Host Here", "--forget"])
        #expect(forgetting.status == 64, "\(forgetting.output)")
        #expect(forgetting.output.contains("--forget takes the host's address"), "\(forgetting.output)")
    }

    /// Normal use logs no breach: the tool ending its TLS connection without a close, a launch
    /// of a scheme nobody declared, an open of a package that is not there are events
    /// (`event=`); a policy the client ran into still is a breach.
    @Test func normalUseLogsNoBreach() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: ["--tls", "optional"])
        let address = "127.0.0.1:\(host.port)"
        #expect(try await atrium(["ping", address, "-c", "2", "-i", "0"]).status == 0)
        #expect(try await atrium(["apps", address]).status == 0)
        #expect(try await atrium(["launch", address, "nobody-declared://x"]).status == 1)
        #expect(
            try await atrium(["send", address, "--package", "no.such.package", "--service", "s", "A=1"]).status == 1)
        #expect(await host.waitForLog("event=launch (undeclared scheme) ProtocolUnavailable"), "\(host.lastLines())")
        #expect(await host.waitForLog("event=open refused"), "\(host.lastLines())")
        #expect(await host.stop() == 0)
        #expect(!host.log.contains("breach="), "\(host.log.split(separator: "\n").filter { $0.contains("breach=") })")
    }

    @Test func theToolSaysWhyAPackageCannotAnswer() async throws {
        var manifests = ClientTests.manifests
        manifests["broken.json"] =
            #"{"manifestVersion": 1, "package": "atrium.tests.broken", "displayName": "Broken", "library": "libNowhere.so", "services": [{"name": "s", "supportsRemoteSystems": true}]}"#
        let host = try await TestHost.start(manifests: manifests)
        let address = "127.0.0.1:\(host.port)"
        let remote = try await atrium(["apps", address])
        #expect(remote.status == 0, "\(remote.output)")
        let row = remote.output.split(separator: "\n").first { $0.hasPrefix("atrium.tests.broken") }
        #expect(row?.contains("  failed  ") == true, "\(remote.output)")
        #expect(!remote.output.contains("libNowhere.so"), "a remote client is not told about the host's files")
        #expect(remote.output.contains("the host tells why a package is not ready to local clients only"))
        let local = try await atrium(["apps", "unix:\(host.socketPath)"])
        #expect(
            local.output.contains("atrium.tests.broken: failed: library libNowhere.so not found (looked at "),
            "\(local.output)")
        let json = try await atrium(["apps", "unix:\(host.socketPath)", "--json-output"])
        #expect(
            json.output.contains(#""state": "failed""#) && json.output.contains(#""state": "ready""#), "\(json.output)")

        let send = try await atrium(["send", address, "--package", "atrium.tests.broken", "--service", "s", "A=1"])
        #expect(send.status != 0)
        #expect(
            send.output.contains(
                #"open atrium.tests.broken/s: AppUnavailable (2): package "atrium.tests.broken" is not available: its plugin is not running (the host's log says why)"#
            ), "\(send.output)")
        let sendJSON = try await atrium([
            "send", "unix:\(host.socketPath)", "--package", "atrium.tests.broken", "--service", "s", "A=1",
            "--json-output",
        ])
        #expect(
            sendJSON.output.contains(
                #""error": "package \"atrium.tests.broken\" is not available: library libNowhere.so not found"#),
            "\(sendJSON.output)")
        #expect(await host.stop() == 0)
    }

    @Test func statusShowsWhatTheHostHolds() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests)
        // Traffic first: three requests (Roman pings) and their connection.
        let pings = try await atrium(["ping", "127.0.0.1:\(host.port)", "--insecure", "-c", "3", "-i", "0.05"])
        #expect(pings.status == 0, "\(pings.output)")
        // The ping's connection is let go as its close reaches the host: asked until it has.
        var status = try await atrium(["status", "--socket", host.socketPath])
        let settled = ContinuousClock.now + .seconds(5)
        while !status.output.contains("(tcp 0, local 1)"), ContinuousClock.now < settled {
            try await Task.sleep(for: .milliseconds(50))
            status = try await atrium(["status", "--socket", host.socketPath])
        }
        #expect(status.status == 0, "\(status.output)")
        // Which host, where it listens, and its traffic since it started.
        #expect(status.output.hasPrefix("atriumd \(AtriumVersion.current), up "), "\(status.output)")
        #expect(
            status.output.contains("listening    tcp 127.0.0.1:\(host.port), unix \(host.socketPath)\n"),
            "\(status.output)")
        #expect(status.output.contains(" requests/s, "), "\(status.output)")
        #expect(status.output.contains(" launches/s (since it started)"), "\(status.output)")
        // The asking connection is the only one; the Echo package is loaded and ready.
        #expect(status.output.contains("connections  1 (tcp 0, local 1); in memory 1"), "\(status.output)")
        #expect(status.output.contains("ready      in process atrium.examples.echo"), "\(status.output)")
        let json = try await atrium(["status", "--socket", host.socketPath, "--json"])
        #expect(json.status == 0 && json.output.contains(#""channels": 0"#), "\(json.output)")
        // Counted as they came: 3 requests, on 1 TCP connection (+ the 2 local ones asking).
        #expect(json.output.contains(#""requestsReceived": 3"#), "\(json.output)")
        #expect(json.output.contains(#""connectionsAccepted": 3"#), "\(json.output)")
        let version = try await atrium(["--version"])
        #expect(version.status == 0 && version.output == AtriumVersion.current + "\n", "\(version.output)")
        // A refresh interval too short to mean anything, and a socket nobody listens on.
        let tooOften = try await atrium(["status", "--socket", host.socketPath, "--watch", "--interval", "0.01"])
        #expect(tooOften.status == 64 && tooOften.output.contains("--interval must be at least 0.1 seconds"))
        let nobody = try await atrium(["status", "--socket", host.socketPath + ".missing"])
        #expect(nobody.status == 3, "\(nobody.output)")
        #expect(await host.stop() == 0)
    }

    @Test func exitCodesScriptsCanUse() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests)
        let address = "127.0.0.1:\(host.port)"
        let failed = try await atrium([
            "send", address, "--package", ClientTests.testPackage, "--service", "test", "Action=fail",
        ])
        #expect(failed.status == 1)
        #expect(failed.output.contains("status: Failure (1)\nerror: failed, as asked"))
        let notInstalled = try await atrium(["send", address, "--package", "no.such", "--service", "x"])
        #expect(notInstalled.status == 1 && notInstalled.output.contains("AppNotInstalled (1)"))
        #expect(await host.stop() == 0)

        let unreachable = try await atrium(["ping", address, "-c", "1"])
        #expect(unreachable.status == 3)
        #expect(
            unreachable.output.contains("cannot connect to \(address): connection refused. Is atriumd running there"))
        let usage = try await atrium(["ping", "not a host:x"])
        #expect(usage.status == 64)
        #expect(usage.output.contains("is not a host: use host:port"))
        let badField = try await atrium(["send", address, "--package", "p", "--service", "s", "novalue"])
        #expect(badField.status == 64 && badField.output.contains("'novalue' is not KEY=VALUE"))

        // A host that requires pairing answers an unpaired device no: 1 from every command, as
        // from ping, not 3 (it was reached).
        let pairing = try await TestHost.start(manifests: ClientTests.manifests, arguments: PairingTests.arguments)
        let paired = "127.0.0.1:\(pairing.port)"
        let refusedPing = try await atrium(["ping", paired, "-c", "1"])
        #expect(refusedPing.status == 1, "\(refusedPing.output)")
        let refusedApps = try await atrium(["apps", paired])
        #expect(refusedApps.status == 1 && refusedApps.output.contains("not paired"), "\(refusedApps.output)")
        let refusedSend = try await atrium([
            "send", paired, "--package", "atrium.examples.echo", "--service", "atrium.echo", "A=1",
        ])
        #expect(refusedSend.status == 1, "\(refusedSend.output)")
        let help = try await atrium(["--help"])
        #expect(help.output.contains("1 the host or service answered"), "exit codes are listed in --help")
        #expect(await pairing.stop() == 0)
    }

    /// A device revoked while it pings hears the host's reason, and how many pings went out.
    @Test func aRevokedDevicesPingSaysWhy() async throws {
        let stateHome = TLSTests.temporaryFolder("revoked-state")
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: PairingTests.arguments)
        let address = "127.0.0.1:\(host.port)"
        let paired = try await PairingTests.toolPairs(host, address, stateHome: stateHome)
        #expect(paired.status == 0, "\(paired.output)")
        let output = stateHome.appendingPathComponent("ping.out")
        let pinging = try startAtrium(["ping", address, "-c", "50", "-i", "0.1"], stateHome: stateHome, file: output)
        let admin = try await PairingTests.operatorConnection(host)
        // Revoked once two pings went through (one every 0.1 s; the tool may take a while to
        // start on a busy machine, so its output is watched, for at most 20 s).
        func pongs() -> Int {
            ((try? String(contentsOf: output, encoding: .utf8)) ?? "").components(separatedBy: "pong from").count - 1
        }
        for _ in 0..<400 where pongs() < 2 { try await Task.sleep(for: .milliseconds(50)) }
        #expect(pongs() >= 2, "the ping went out before the revocation")
        let device = try #require(try await admin.admin("devices.list")["devices"]?.array?.maps?.first?["identity"])
        _ = try await admin.admin("devices.revoke", ["device": device])
        await admin.close()
        let outcome = await pinging.finish()
        #expect(outcome.status == 1, "\(outcome.output)")
        #expect(outcome.output.contains("revoked"), "the host's reason: \(outcome.output)")
        #expect(!outcome.output.contains("call openRemote() first"), "\(outcome.output)")
        #expect(outcome.output.contains("not sent: the connection ended"), "\(outcome.output)")
        #expect(!outcome.output.contains("50 sent"), "\(outcome.output)")
        // What this client knows now: paired here, refused there (atrium discover says so),
        // until it pairs again.
        let known = KnownHosts(folder: stateHome.appendingPathComponent("atrium"))
        let endpoint = try #require(AtriumEndpoint(address))
        let identity = try #require(try known.identity(of: endpoint))
        #expect(known.isPaired(identity) && known.refusedSince(identity) != nil)
        let again = try await PairingTests.toolPairs(host, address, stateHome: stateHome)
        #expect(again.status == 0, "\(again.output)")
        #expect(known.refusedSince(identity) == nil)
        #expect(await host.stop() == 0)
    }

    /// Echo with declared commands: what `atrium send` builds comes back as it was sent.
    static let typedEcho = """
        { "manifestVersion": 1, "package": "atrium.tests.typedecho", "library": "libEcho.so",
          "services": [
            { "name": "echo", "supportsRemoteSystems": true, "commands": [
                { "command": "put", "description": "Stores a note.", "fields": [
                    { "name": "Key", "type": "string", "description": "The note's name." },
                    { "name": "Count", "type": "int", "optional": true },
                    { "name": "Ratio", "type": "double", "optional": true },
                    { "name": "When", "type": "date", "optional": true },
                    { "name": "Tags", "type": "array", "of": "string", "optional": true },
                    { "name": "Id", "type": "uuid", "optional": true },
                    { "name": "Blob", "type": "bytes", "optional": true } ] },
                { "command": "list" } ] },
            { "name": "local", "commands": [{ "command": "ping" }] } ] }
        """

    @Test func describeAndSendReadTheDeclaredCommands() async throws {
        let host = try await TestHost.start(
            manifests: ClientTests.manifests.merging(["typed.json": Self.typedEcho]) { $1 })
        let address = "127.0.0.1:\(host.port)"
        let package = "atrium.tests.typedecho"

        let described = try await atrium(["describe", package, "echo", address])
        #expect(described.status == 0, "\(described.output)")
        #expect(
            described.output.hasPrefix(
                """
                echo (atrium.tests.typedecho): 2 commands, chosen by the key Command

                  put: Stores a note.
                      Key    string  The note's name.
                      Count  int, optional
                """), "\(described.output)")
        #expect(described.output.contains("      Tags   array of string, optional\n"))
        #expect(described.output.contains("  list\n      (no fields)\n"))
        #expect(
            described.output.contains(
                "send one: atrium send \(address) --package \(package) --service echo Command=put Key=..."))
        // Over TCP the local-only service is not described; over the local socket it is.
        let remote = try await atrium(["describe", package, "local", address])
        #expect(
            remote.status == 1 && remote.output.contains("described over the host's local socket"), "\(remote.output)")
        let local = try await atrium(["describe", package, "unix:\(host.socketPath)"])
        #expect(local.status == 0 && local.output.contains("local (\(package)): 1 command"), "\(local.output)")
        let json = try await atrium(["describe", package, "echo", address, "--json-output"])
        let parsed = try MessageText.valueSet(json: json.output)
        let commands = parsed["services"]?.array?.first?.map?["commands"]?.array
        #expect(commands?.count == 2 && commands?.first?.map?["command"] == "put", "\(json.output)")
        let none = try await atrium(["describe", "atrium.examples.echo", address])
        #expect(none.status == 0 && none.output.contains("no service says what it takes"))
        let missing = try await atrium(["describe", "no.such.package", address])
        #expect(missing.status == 1 && missing.output.contains("no package no.such.package"))

        // Each field is read as its declared type, and comes back so from Echo.
        let sent = try await atrium([
            "send", address, "--package", package, "--service", "echo", "--json-output", "Command=put", "Key=3",
            "Ratio=2", "When=2026-11-22T10:00:00Z", #"Tags=["a","b"]"#, "Id=E621E1F8-C36C-495A-93FC-0C247A3E6E5F",
            "Blob=AQI=", "Count=7",
        ])
        #expect(sent.status == 0, "\(sent.output)")
        let echoed = try MessageText.valueSet(json: sent.output)["message"]?.map
        #expect(echoed?["Key"] == "3" && echoed?["Ratio"] == .double(2) && echoed?["Count"] == 7)
        #expect(echoed?["Tags"] == .array(ValueArray(strings: ["a", "b"])))
        // (JSON output writes dates, UUIDs and bytes as text.)
        #expect(echoed?["When"] == "2026-11-22T10:00:00.000Z" && echoed?["Blob"] == "AQI=", "\(sent.output)")
        let viaJSON = try await atrium([
            "send", address, "--package", package, "--service", "echo", "--json",
            #"{"Command": "put", "Key": "k", "Ratio": 2, "When": "2026-11-22T10:00:00Z"}"#,
        ])
        #expect(
            viaJSON.status == 0 && viaJSON.output.contains(#""Ratio": 2.0, "When": 1(1795341600)"#), "\(viaJSON.output)"
        )

        // The shell completes KEY=VALUE words from the declaration (what the scripts of
        // `atrium --generate-completion-script SHELL` ask for): the commands, then the chosen
        // command's fields not given yet.
        func completions(_ words: [String]) async throws -> [String] {
            let arguments = [
                "---completion", "send", "--", "positional@1", "\(words.count - 1)", "\(words.last!.count)",
            ]
            let result = try await atrium(arguments + words)
            #expect(result.status == 0, "\(result.output)")
            return result.output.split(separator: "\n").map(String.init)
        }
        let line = ["send", address, "--package", package, "--service", "echo"]
        #expect(try await completions(line + ["Com"]) == ["Command=put", "Command=list"])
        #expect(try await completions(line + ["Command=p"]) == ["Command=put"])
        #expect(
            try await completions(line + ["Command=put", "Ratio=2", ""])
                == ["Key=", "Count=", "When=", "Tags=", "Id=", "Blob="])
        #expect(try await completions(line + ["Command=put", "T"]) == ["Tags="])
        #expect(
            try await completions([
                "send", address, "--package", "atrium.examples.echo", "--service", "atrium.echo", "",
            ]).isEmpty)

        // A message that does not match is not sent, and says why.
        let wrong = try await atrium([
            "send", address, "--package", package, "--service", "echo", "Command=put", "Kye=a",
        ])
        #expect(wrong.status == 1)
        #expect(
            wrong.output.contains(
                """
                not sent: the message does not match what the service declares (--unchecked sends it anyway)
                  missing field "Key" (string)
                  "Kye" is not a field of put
                """), "\(wrong.output)")
        #expect(wrong.output.contains("put takes: Key (string), Count (int, optional)"))
        let badValue = try await atrium([
            "send", address, "--package", package, "--service", "echo", "Command=put", "Key=a", "Count=x",
        ])
        #expect(
            badValue.status == 64 && badValue.output.contains("Count takes an int; 'x' is not one"),
            "\(badValue.output)")
        // --unchecked sends it, and the host refuses it with the same reasons.
        let unchecked = try await atrium([
            "send", address, "--package", package, "--service", "echo", "Command=put", "Kye=a", "--unchecked",
        ])
        #expect(unchecked.status == 1)
        #expect(
            unchecked.output.contains(
                #"status: Failure (1)\#nerror: missing field "Key" (string); "Kye" is not a field of put"#),
            "\(unchecked.output)")
        #expect(await host.stop() == 0)
    }

    @Test func helpHasAnExampleForEveryCommand() async throws {
        for command in ["ping", "apps", "send", "describe"] {
            let help = try await atrium([command, "--help"])
            #expect(help.status == 0)
            #expect(help.output.contains("Example"), "atrium \(command) --help shows an example")
        }
        let overview = try await atrium(["--help"])
        #expect(overview.output.contains("Exit codes"))
    }

    /// Every command's help, as a pipe gets it (80 columns), with no example broken in two and
    /// no paragraph left in fragments by lines written wider than that.
    @Test(arguments: [
        "", "ping", "apps", "send", "describe", "launch", "discover", "bench", "pair", "pairing", "devices", "status",
        "new", "new plugin", "new client",
    ])
    func helpFitsEightyColumns(_ command: String) async throws {
        let help = try await helpAtEightyColumns(
            "atrium", command, environment: ["XDG_STATE_HOME": toolStateHome.path])
        #expect(help.status == 0)
        #expect(help.output.contains("USAGE:"), "\(help.output)")
        #expect(helpLayoutProblems(help.output) == [], "atrium \(command) --help")
    }
}

struct MessageTextTests {
    static let typed = ServiceInterface(commands: [
        .init(
            name: "put",
            fields: [
                .init(name: "Name", type: .kind(.string)), .init(name: "Ratio", type: .kind(.double)),
                .init(name: "Ok", type: .kind(.bool)), .init(name: "When", type: .kind(.date)),
                .init(name: "Weights", type: .array(of: .double)), .init(name: "Meta", type: .kind(.map)),
                .init(name: "Any", type: .any),
            ])
    ])

    @Test func keyValueWordsReadAsTheirDeclaredTypes() throws {
        let message = try MessageText.valueSet(
            arguments: [
                "Command=put", "Name=3", "Ratio=2", "Ok=true", "When=1700000000.5", "Weights=[1, 2.5]",
                #"Meta={"A": 1}"#, "Any=4", "Other=5", "Forced:=6",
            ],
            interface: Self.typed)
        #expect(
            message == [
                "Command": "put", "Name": "3", "Ratio": 2.0, "Ok": true,
                "When": .date(Timestamp(secondsSince1970: 1_700_000_000.5)),
                "Weights": .array(ValueArray(doubles: [1, 2.5])), "Meta": ["A": 1], "Any": 4, "Other": 5,
                "Forced": "6",
            ])
        // Another command, or none: words are read as without a declaration.
        #expect(try MessageText.valueSet(arguments: ["Command=get", "Name=3"], interface: Self.typed)["Name"] == 3)
        for (word, expected) in [
            ("Ratio=x", "Ratio takes a double; 'x' is not one"),
            ("Ok=yes", "Ok takes a bool (true or false); 'yes' is not one"),
            ("When=tuesday", "When takes a date (ISO 8601"),
            ("Weights=1,2", #"Weights takes an array of double as JSON, like Weights='["a", "b"]'"#),
            ("Meta=x", #"Meta takes a map as JSON, like Meta='{"Key": 1}'"#),
        ] {
            #expect(throws: MessageText.Problem.self, "\(word)") {
                try MessageText.valueSet(arguments: ["Command=put", word], interface: Self.typed)
            }
            do {
                _ = try MessageText.valueSet(arguments: ["Command=put", word], interface: Self.typed)
            } catch {
                #expect("\(error)".hasPrefix(expected), "\(error)")
            }
        }
    }

    @Test func jsonMessagesAreCompletedToTheDeclaredKinds() throws {
        let message = try MessageText.valueSet(
            json: #"{"Command": "put", "Ratio": 2, "When": "2023-11-14T22:13:20Z", "Weights": [1, 2], "Name": 5}"#)
        let completed = MessageText.completed(message, for: Self.typed)
        #expect(completed["Ratio"] == .double(2))
        #expect(completed["When"] == .date(Timestamp(secondsSince1970: 1_700_000_000)))
        #expect(completed["Weights"] == .array(ValueArray(doubles: [1, 2])))
        #expect(completed["Name"] == 5, "what is not the same thing written another way is left for the check")
        let seconds = MessageText.completed(["Command": "put", "When": 1_700_000_000], for: Self.typed)
        #expect(seconds["When"] == .date(Timestamp(secondsSince1970: 1_700_000_000)))
        #expect(Self.typed.problems(in: completed).problems.contains(#"field "Name" must be a string, not int 5"#))
    }

    @Test func keyValueWords() throws {
        #expect(
            try MessageText.valueSet(arguments: ["A=1", "B=1.5", "C=true", "D=text", "E:=2", "F=", "G=-1e3"])
                == ["A": 1, "B": 1.5, "C": true, "D": "text", "E": "2", "F": "", "G": -1000.0])
        #expect(throws: MessageText.Problem.self) { try MessageText.valueSet(arguments: ["=1"]) }
    }

    @Test func jsonInAndOut() throws {
        let set = try MessageText.valueSet(
            json: #"{"i": 1, "d": 1.0, "b": false, "s": "x", "a": ["p", "q"], "m": {"k": [1.5]}}"#)
        #expect(set == ["i": 1, "d": 1.0, "b": false, "s": "x", "a": ["p", "q"], "m": ["k": [1.5]]])
        #expect(set.keys == ["i", "d", "b", "s", "a", "m"], "keys keep their order")
        #expect(
            try MessageText.valueSet(json: #"{"u": "\u00fc\ud83d\ude00", "e": "a\"b"}"#) == ["u": "ü😀", "e": "a\"b"])
        let bad = #expect(throws: MessageText.Problem.self) { try MessageText.valueSet(json: #"{"a": }"#) }
        #expect(bad?.description == "not valid JSON at character 7: expected a value")
        #expect(set["d"]?.kind == .double, "1.0 stays a double")
        let mixed = #expect(throws: MessageText.Problem.self) { try MessageText.valueSet(json: #"{"a": [1, "x"]}"#) }
        #expect(mixed?.description == "message.a[1]: array mixes int and string")
        #expect(
            try MessageText.valueSet(json: #"{"a": [1, 2.5]}"#) == ["a": .array(ValueArray(doubles: [1, 2.5]))],
            "JSON has numbers: ints among doubles are doubles")
        #expect(throws: MessageText.Problem.self) { try MessageText.valueSet(json: #"{"n": null}"#) }
        #expect(throws: MessageText.Problem.self) { try MessageText.valueSet(json: "[1]") }
        let out = MessageText.json(
            ["d": .date(Timestamp(secondsSince1970: 0)), "x": .bytes([255]), "q": "\"\n"], pretty: false)
        #expect(out == #"{"d":"1970-01-01T00:00:00.000Z","x":"/w==","q":"\"\n"}"#)
    }
}

/// `atrium bench` for a short, bounded run against a real host and against the baseline.
@Suite(.serialized)
struct BenchCommandTests {
    @Test func aShortRunMeasuresRoundTrips() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests)
        let run = try await atrium([
            "bench", "127.0.0.1:\(host.port)", "--connections", "2", "--pipeline", "4", "--duration", "1",
            "--json-output",
        ])
        #expect(run.status == 0, "\(run.output)")
        let result = try MessageText.valueSet(json: run.output.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect((result["completed"]?.int ?? 0) > 0)
        #expect(result["failed"] == 0)
        #expect(result["connections"] == 2 && result["pipeline"] == 4)
        #expect(result["tls"] == true, "bench speaks TLS over TCP, as every atrium command does")
        #expect((result["setupP50Microseconds"]?.number ?? 0) > 0)
        let p50 = try #require(result["p50Microseconds"]?.number)
        let p99 = try #require(result["p99Microseconds"]?.number)
        #expect(p50 > 0 && p99 >= p50)

        let idle = try await atrium([
            "bench", "127.0.0.1:\(host.port)", "--idle", "--connections", "20", "--duration", "0.2",
        ])
        #expect(idle.status == 0 && idle.output.contains("holding 20 idle connections"))

        let refused = try await atrium(["bench", "127.0.0.1:\(host.port)", "--package", "no.such", "--duration", "1"])
        #expect(refused.status == 3 && refused.output.contains("AppNotInstalled (1)"))
        #expect(await host.stop() == 0)
    }

    @Test func theBaselineAnswersTheSameProtocol() async throws {
        let process = Process()
        process.executableURL = TestHost.buildFolder.appendingPathComponent("atrium-baseline")
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        defer { process.terminate() }
        let line = String(decoding: pipe.fileHandleForReading.availableData, as: UTF8.self)
        let port = try #require(
            line.split(separator: ":").last.flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
        // The baseline speaks plain TCP only.
        let run = try await atrium(["bench", "127.0.0.1:\(port)", "--duration", "0.5", "--json-output", "--insecure"])
        #expect(run.status == 0, "\(run.output)")
        #expect(run.output.contains("\"failed\":0"))
    }
}
