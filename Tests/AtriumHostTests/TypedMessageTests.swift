import AtriumHost
import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// Services that declare their commands (`services[].commands`): the manifest's rules, and a
/// real host checking every request before the plugin sees it, in process and in a worker.
@Suite(.serialized) struct TypedMessageTests {
    func check(_ json: String) -> ManifestReport {
        Manifest.check(json: Data(json.utf8), file: URL(fileURLWithPath: "/m/test.json"))
    }

    /// A manifest of one service with `commands` (JSON text).
    func withCommands(_ commands: String, extra: String = "") -> String {
        #"{"manifestVersion": 1, "package": "p", "library": "l", "services": [{"name": "s", "commands": \#(commands)\#(extra)}]}"#
    }

    @Test func commandsAreReadWithTheirFields() throws {
        let report = check(
            #"""
            {"manifestVersion": 1, "package": "p", "library": "l", "services": [
              {"name": "s", "commandKey": "Type", "commands": [
                {"command": "put", "description": "Stores a note.", "fields": [
                  {"name": "Key", "type": "string", "description": "its name"},
                  {"name": "Tags", "type": "array", "of": "string", "optional": true},
                  {"name": "Extra", "type": "any", "optional": true}]},
                {"command": "list", "additionalFields": true}]},
              {"name": "plain"}]}
            """#)
        #expect(report.errors.isEmpty && report.warnings.isEmpty, "\(report.errors) \(report.warnings)")
        let manifest = try #require(report.manifest)
        #expect(manifest.services[0].interface == ServiceInterface.example(commandKey: "Type"))
        #expect(manifest.services[1].interface == nil)
    }

    @Test(arguments: [
        (#""x""#, "services[0].commands: must be an array of 1 to 256 commands"),
        ("[]", "services[0].commands: must be an array of 1 to 256 commands"),
        (#"[{"fields": []}]"#, "services[0].commands[0].command: is missing"),
        (#"[{"command": ""}]"#, "services[0].commands[0].command: must be a string of 1 to 128 characters"),
        (#"[{"command": "a"}, {"command": "a"}]"#, #"services[0].commands[1].command: "a" is declared twice"#),
        (#"[{"command": "a", "fields": [{"name": "K", "type": "strng"}]}]"#, #"did you mean "string"?"#),
        (#"[{"command": "a", "fields": [{"name": "K"}]}]"#, "services[0].commands[0].fields[0].type: is missing"),
        (
            #"[{"command": "a", "fields": [{"name": "K", "type": "int", "of": "int"}]}]"#,
            #"fields[0].of: is the kind of an array's elements: it needs "type": "array""#
        ),
        (
            #"[{"command": "a", "fields": [{"name": "K", "type": "array", "of": "array"}]}]"#,
            "fields[0].of: must be one of"
        ),
        (
            #"[{"command": "a", "fields": [{"name": "Command", "type": "int"}]}]"#,
            #"fields[0].name: "Command" is the command's own key, not a field"#
        ),
        (
            #"[{"command": "a", "fields": [{"name": "K", "type": "int"}, {"name": "K", "type": "string"}]}]"#,
            #"fields[1].name: "K" is declared twice"#
        ),
        (
            #"[{"command": "a", "fields": [{"name": "K", "type": "int", "optional": 1}]}]"#,
            "must be true or false, not 1"
        ),
        (#"[{"command": "a", "additionalFields": "yes"}]"#, "additionalFields: must be true or false"),
        (#"[{"command": "a\u0007"}]"#, "holds a control or invisible character"),
        (#"[{"command": "a", "description": "\#(String(repeating: "d", count: 501))"}]"#, "at most 500 characters"),
        (#"[{"command": "a", "fields": {"K": "int"}}]"#, "fields: must be an array of at most 256 fields"),
        // The limits, one past each.
        (
            "[" + (0...256).map { #"{"command": "c\#($0)"}"# }.joined(separator: ",") + "]",
            "services[0].commands: must be an array of 1 to 256 commands"
        ),
        (
            #"[{"command": "a", "fields": ["#
                + (0...256).map { #"{"name": "f\#($0)", "type": "int"}"# }
                .joined(separator: ",") + "]}]",
            "fields: must be an array of at most 256 fields"
        ),
        (#"[{"command": "\#(String(repeating: "c", count: 129))"}]"#, "must be a string of 1 to 128 characters"),
        (
            #"[{"command": "a", "fields": [{"name": "\#(String(repeating: "n", count: 129))", "type": "int"}]}]"#,
            "fields[0].name: must be a string of 1 to 128 characters"
        ),
    ])
    func mistakesInCommandsAreNamed(commands: String, expected: String) {
        let report = check(withCommands(commands))
        #expect(report.manifest == nil)
        #expect(report.errors.count == 1 && report.errors[0].detail.contains(expected), "\(report.errors)")
    }

    @Test func theLimitsThemselvesAreTaken() throws {
        let commands =
            "[" + (0..<255).map { #"{"command": "c\#($0)"}"# }.joined(separator: ",")
            + #", {"command": "\#(String(repeating: "c", count: 128))", "description": "\#(String(repeating: "d", count: 500))", "fields": ["#
            + (0..<256).map { #"{"name": "f\#($0)", "type": "int"}"# }.joined(separator: ",") + "]}]"
        let report = check(withCommands(commands))
        #expect(report.errors.isEmpty, "\(report.errors)")
        #expect(report.manifest?.services[0].interface?.commands.count == 256)
        #expect(report.manifest?.services[0].interface?.commands.last?.fields.count == 256)
    }

    @Test func eachCommandIsCheckedOnItsOwnAndUnknownKeysAreWarnedOf() {
        let report = check(
            withCommands(
                #"[{"command": "a", "fields": [{"name": "K", "type": "int", "optinal": true}]}, {"command": 1}, {"comand": "c"}]"#
            ))
        #expect(
            report.errors.map(\.detail) == [
                "services[0].commands[1].command: must be a string of 1 to 128 characters (the value that selects the command), not 1",
                "services[0].commands[2].command: is missing",
            ])
        #expect(
            report.warnings.map(\.detail) == [
                #"services[0].commands[0].fields[0].optinal: is not a key this host knows, and is ignored; did you mean "optional"?"#,
                #"services[0].commands[2].comand: is not a key this host knows, and is ignored; did you mean "command"?"#,
            ])
    }

    @Test func commandKeyNeedsCommandsAndFunctionsDeclareTheirOwn() {
        #expect(
            check(
                #"{"manifestVersion": 1, "package": "p", "library": "l", "services": [{"name": "s", "commandKey": "T"}]}"#
            )
            .errors.map(\.detail) == [#"services[0].commandKey: names the key of a command: it needs "commands""#])
        let functions = check(
            #"""
            {"manifestVersion": 1, "package": "p", "library": "l",
             "services": [{"name": "s", "commands": [{"command": "x"}]}],
             "functions": [{"command": "x", "symbol": "x"}]}
            """#)
        #expect(
            functions.errors.map(\.detail) == [
                "services[0].commands: a package of declared functions takes the commands its functions declare: leave commands out"
            ])
    }

    // MARK: - A real host

    static let package = "atrium.tests.typed"

    /// The C test service (which segfaults on {"Crash": "segv"}) with one typed service and
    /// one untyped, in process or in a worker.
    static func manifest(isolation: String) -> String {
        """
        { "manifestVersion": 1, "package": "\(package)", "library": "libAtriumTestCService.so",
          "isolation": "\(isolation)",
          "services": [
            { "name": "typed", "supportsRemoteSystems": true, "commands": [
                { "command": "read", "fields": [
                    { "name": "Int", "type": "int" },
                    { "name": "Text", "type": "string", "optional": true },
                    { "name": "Numbers", "type": "array", "of": "int", "optional": true } ] } ] },
            { "name": "local", "commands": [{ "command": "read" }] },
            { "name": "plain", "supportsRemoteSystems": true } ] }
        """
    }

    static func startTypedHost(isolation: String, arguments: [String] = []) async throws -> TestHost {
        try await startHost(
            arguments: arguments,
            manifests: Fixtures.referenceManifests.merging(["typed.json": manifest(isolation: isolation)]) { $1 })
    }

    @Test(arguments: ["inProcess", "process"])
    func requestsAreCheckedBeforeThePluginSeesThem(isolation: String) async throws {
        let host = try await Self.startTypedHost(isolation: isolation, arguments: ["--max-in-flight", "4"])
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "typed", package: Self.package) == .success)

        let good = try await client.request(channel: 1, id: 1, ["Command": "read", "Int": 41, "Text": "x"])
        #expect(good.status == .success)
        #expect(try good.decoded["IntPlusOne"] == .int(42))

        // What the plugin would crash on never reaches it: the field is not declared.
        let hostile = try await client.request(channel: 1, id: 2, ["Command": "read", "Int": 1, "Crash": "segv"])
        #expect(hostile.status == .failure)
        #expect(
            hostile.error == #""Crash" is not a field of read (its fields: Int, Text, Numbers)"#,
            "\(String(describing: hostile.error))")

        let refusals: [(ValueSet, String)] = [
            (["Int": 41], "the message has no Command: it names the command (read)"),
            (["Command": "raed", "Int": 1], #"unknown Command "raed"; this service has: read; did you mean "read"?"#),
            (["Command": "read", "Int": "41"], #"field "Int" must be an int, not string "41""#),
            (
                ["Command": "read", "Int": 1, "Numbers": .array(ValueArray(doubles: [1.5]))],
                #"field "Numbers" must be an array of int, not an array of double"#
            ),
            (["Command": "read"], #"missing field "Int" (int)"#),
        ]
        // More refusals than --max-in-flight: a refused request gives its place back.
        for (index, (message, error)) in refusals.enumerated() {
            let answer = try await client.request(channel: 1, id: UInt64(10 + index), message)
            #expect(
                answer.status == .failure && answer.error == error, "\(message): \(String(describing: answer.error))")
            #expect(try answer.decoded.isEmpty)
        }
        var flood: ValueSet = ["Command": "read", "Int": 1]
        for index in 0..<5_000 { flood["k\(index)"] = .int(Int64(index)) }
        let flooded = try await client.request(channel: 1, id: 20, flood)
        #expect(flooded.status == .failure && flooded.error?.hasSuffix("; and 4995 more") == true)

        // The plugin is still there (no crash, no restart), and answers.
        let after = try await client.request(channel: 1, id: 21, ["Command": "read", "Int": 1])
        #expect(try after.decoded["IntPlusOne"] == .int(2))
        #expect(host.count("worker process started") == (isolation == "process" ? 1 : 0), "\(host.lastLines())")

        // A service that declares nothing takes any message, as before.
        #expect(try await client.open(channel: 2, service: "plain", package: Self.package) == .success)
        let plain = try await client.request(channel: 2, id: 30, ["Int": 5])
        #expect(try plain.decoded["IntPlusOne"] == .int(6))
        #expect(host.logged(#"refused: "Crash" is not a field of read"#), "\(host.lastLines())")
        await client.close()
        _ = await host.stop()
    }

    @Test func appsWithAPackageCarriesItsInterfacesAndOnlyThoseAClientMayOpen() async throws {
        let host = try await Self.startTypedHost(isolation: "inProcess")
        let client = try await connectedClient(host)
        try await client.send(.apps(id: 1, package: Self.package))
        guard case .apps(let answer) = try await client.next() else {
            Issue.record("no apps answer")
            return
        }
        #expect(answer.apps.map(\.package) == [Self.package])
        // Over TCP: the remote-capable typed service; not the local-only one, nor the untyped.
        #expect(answer.apps.first?.interfaces.keys.sorted() == ["typed"])
        #expect(
            answer.apps.first?.interfaces["typed"]?.commands.first?.fields.map(\.name) == ["Int", "Text", "Numbers"])

        // Without a package: every package, and no interfaces.
        try await client.send(.apps(id: 2))
        guard case .apps(let all) = try await client.next() else {
            Issue.record("no apps answer")
            return
        }
        #expect(all.apps.count == Fixtures.referenceManifests.count + 1)
        #expect(all.apps.allSatisfy { $0.interfaces.isEmpty })

        // A package of declared functions is described by its functions.
        try await client.send(.apps(id: 3, package: "atrium.examples.mathlib"))
        guard case .apps(let math) = try await client.next() else {
            Issue.record("no apps answer")
            return
        }
        let add = math.apps.first?.interfaces["atrium.math"]?.command(named: "add")
        #expect(add?.fields.map(\.name) == ["a", "b"] && add?.additionalFields == true)

        // An unknown package: an empty answer.
        try await client.send(.apps(id: 4, package: "no.such.package"))
        #expect(try await client.next() == .apps(AppsFrame(id: 4, apps: [])))
        await client.close()

        // Over the local socket the local-only service is described too.
        let local = try await TestClient.connect(unixSocket: host.socketPath)
        try await local.hello()
        try await local.send(.apps(id: 5, package: Self.package))
        guard case .apps(let seen) = try await local.next() else {
            Issue.record("no apps answer")
            return
        }
        #expect(seen.apps.first?.interfaces.keys.sorted() == ["local", "typed"])
        await local.close()
        _ = await host.stop()
    }
}
