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
    }

    @Test func helpHasAnExampleForEveryCommand() async throws {
        for command in ["ping", "apps", "send"] {
            let help = try await atrium([command, "--help"])
            #expect(help.status == 0)
            #expect(help.output.contains("Example"), "atrium \(command) --help shows an example")
        }
        let overview = try await atrium(["--help"])
        #expect(overview.output.contains("Exit codes"))
    }
}

struct MessageTextTests {
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
