import AtriumTesting
import Foundation
import Testing

/// `atrium new`, as a new plugin author uses it: each template is written into a folder of
/// its own outside the repository, built the way its README says (make, swift build, swift
/// test), and run against a real atriumd by its own test.sh.
///
/// These build whole Swift packages from nothing, as a new author's first `swift build` does
/// (the client template builds SwiftNIO and TLS: minutes on two cores), so Scripts/test.sh
/// runs them after the rest of the suite, alone, where their compiles do not slow the tests
/// that watch the clock. `swift test --skip TemplateTests` leaves them out.
@Suite(.serialized) struct TemplateTests {
    static let atrium = TestHost.buildFolder.appendingPathComponent("atrium").path

    static let skipReason = "the templates build their own code, not instrumented: the plain suite builds and runs them"
    static var underSanitizer: Bool { ProcessInfo.processInfo.environment["ATRIUM_SANITIZER"] != nil }

    /// A fresh folder outside the repository.
    static func scratch() throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "atrium-new-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return folder
    }

    /// Runs `command` in `folder` through the shell (`arguments` are its $0, $1, ...), and
    /// expects it to succeed.
    @discardableResult
    static func run(_ command: String, in folder: URL, _ comment: String, arguments: [String] = []) async throws
        -> String
    {
        let result = try await runProgram("/bin/sh", ["-c", command] + arguments, in: folder)
        #expect(result.status == 0, "\(comment): \(command) said:\n\(result.output)")
        return result.output
    }

    @Test(.disabled(if: underSanitizer, Comment(rawValue: skipReason)))
    func aCPluginBuildsWithMakeAndAnswersInAtriumd() async throws {
        let scratch = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let written = try await runProgram(Self.atrium, ["new", "plugin", "notes", "--language", "c"], in: scratch)
        #expect(written.status == 0, "\(written.output)")
        #expect(
            written.output.contains("next: cd '\(scratch.appendingPathComponent("notes").path)' && make && ./test.sh"))
        let project = scratch.appendingPathComponent("notes")
        let files = try FileManager.default.contentsOfDirectory(atPath: project.path).sorted()
        #expect(files == [".gitignore", "Makefile", "README.md", "notes.c", "notes.json", "test.sh"])
        // Whatever the umask, nothing another user could write: atriumd would refuse it.
        for file in files + ["."] {
            let mode =
                try FileManager.default.attributesOfItem(atPath: project.appendingPathComponent(file).path)[
                    .posixPermissions] as? Int
            #expect(mode.map { $0 & 0o022 == 0 } == true, "\(file): \(String(describing: mode))")
        }

        // The README's steps: make, then test.sh (which checks the manifest with atriumd --check,
        // serves the plugin and sends it hello). Warnings would be a defect of the template.
        let make = try await Self.run("make", in: project, "make")
        #expect(!make.contains("warning"), "\(make)")
        let test = try await Self.run("./test.sh", in: project, "test.sh")
        #expect(test.contains("1 manifests, 1 would load, 0 would not"), "\(test)")
        #expect(test.contains(#"{"Greeting": "Hello, Ada!"}"#), "\(test)")
        #expect(test.contains("ok: notes answered"), "\(test)")

        // What a client can send it: a long name of characters of several bytes is greeted
        // whole, a name of another kind and a command with more after a NUL are refused.
        let host = try await TestHost.start(manifestsFolder: project)
        let client = try await TestClient.connect(unixSocket: host.socketPath)
        _ = try await client.hello()
        #expect(try await client.open(channel: 1, service: "notes", package: "local.notes") == .success)
        let long = String(repeating: "é", count: 300) + "😀"
        let greeted = try await client.request(channel: 1, id: 1, ["Command": "hello", "Name": .string(long)])
        #expect(greeted.status == .success)
        #expect(try greeted.decoded["Greeting"]?.string == "Hello, \(long)!")
        // The manifest declares the command: the host refuses what does not match.
        let number = try await client.request(channel: 1, id: 2, ["Command": "hello", "Name": 5])
        #expect(number.status == .failure && number.error == #"field "Name" must be a string, not int 5"#)
        let trailing = try await client.request(channel: 1, id: 3, ["Command": "hello\u{0}x"])
        #expect(
            trailing.status == .failure
                && trailing.error == #"unknown Command "hello\u{0}x"; this service has: hello; did you mean "hello"?"#,
            "\(String(describing: trailing.error))")
        await client.close()
        #expect(await host.stop() == 0)

        // The plugin's own checks, for a manifest that declares no commands (a plugin does not
        // rely on its manifest to guard it).
        let manifestFile = project.appendingPathComponent("notes.json")
        var manifest = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: manifestFile)) as? [String: Any])
        var services = try #require(manifest["services"] as? [[String: Any]])
        #expect(services[0].removeValue(forKey: "commands") != nil)
        manifest["services"] = services
        let plain = String(decoding: try JSONSerialization.data(withJSONObject: manifest), as: UTF8.self)
        let untyped = try await TestHost.start(
            manifests: ["notes.json": plain], arguments: ["--plugin-path", project.path])
        let direct = try await TestClient.connect(unixSocket: untyped.socketPath)
        _ = try await direct.hello()
        #expect(try await direct.open(channel: 1, service: "notes", package: "local.notes") == .success)
        let mistyped = try await direct.request(channel: 1, id: 2, ["Command": "hello", "Name": 5])
        #expect(mistyped.status == .failure && mistyped.error == "Name must be a string")
        let afterNUL = try await direct.request(channel: 1, id: 3, ["Command": "hello\u{0}x"])
        #expect(afterNUL.status == .failure && afterNUL.error?.hasPrefix("unknown command") == true)
        await direct.close()
        #expect(await untyped.stop() == 0)
    }

    @Test(.disabled(if: underSanitizer, Comment(rawValue: skipReason)))
    func aCPluginNamedLikeTheHeadersTypesBuildsUnderAUmaskThatLetsTheGroupWrite() async throws {
        // "atrium" would make `atrium_plugin` clash with the header's type without its prefix;
        // a umask of 002 (usual on desktops) would leave the files group-writable, which
        // atriumd refuses.
        let scratch = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let output = try await Self.run(
            "umask 002 && \"$0\" new plugin atrium --language c --package local.atrium-notes && cd atrium && make && ./test.sh",
            in: scratch, "umask 002", arguments: [Self.atrium])
        #expect(output.contains("ok: atrium answered"), "\(output)")
    }

    @Test(.disabled(if: underSanitizer, Comment(rawValue: skipReason)))
    func aSwiftPluginBuildsTestsAndAnswersInAtriumd() async throws {
        let scratch = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let project = scratch.appendingPathComponent("my-notes")
        let written = try await runProgram(
            Self.atrium,
            [
                "new", "plugin", "my-notes", "--language", "swift", "--package", "com.example.notes", "--output",
                project.path,
            ])
        #expect(written.status == 0, "\(written.output)")
        try await Self.run("swift build", in: project, "swift build")
        let unit = try await Self.run("swift test", in: project, "swift test")
        #expect(unit.contains("2 tests"), "\(unit)")
        let test = try await Self.run("./test.sh", in: project, "test.sh")
        #expect(test.contains(#"{"Greeting": "Hello, Ada!"}"#) && test.contains("ok: my-notes answered"), "\(test)")
    }

    @Test(.disabled(if: underSanitizer, Comment(rawValue: skipReason)))
    func aSwiftClientBuildsAndTalksToAHost() async throws {
        let scratch = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let written = try await runProgram(
            Self.atrium,
            ["new", "client", "echo-client", "--package", Fixtures.echoPackage, "--service", "atrium.echo"],
            in: scratch)
        #expect(written.status == 0, "\(written.output)")
        let project = scratch.appendingPathComponent("echo-client")
        try await Self.run("swift build", in: project, "swift build")

        // Every client example of README.md and docs/ compiles as this program's main.swift
        // (then the template's own is put back).
        let main = project.appendingPathComponent("Sources/echo-client/main.swift")
        let original = try String(contentsOf: main, encoding: .utf8)
        let examples = try DocumentationTests.blocks(ofKind: "swift-client")
        #expect(examples.count >= 3)
        for example in examples {
            try example.code.write(to: main, atomically: true, encoding: .utf8)
            try await Self.run("swift build", in: project, "\(example.file):\(example.line) as main.swift")
        }
        try original.write(to: main, atomically: true, encoding: .utf8)
        try await Self.run("swift build", in: project, "swift build, the template's main.swift again")

        let host = try await startHost(manifests: Fixtures.referenceManifests)
        let answer = try await runProgram(
            project.appendingPathComponent(".build/debug/echo-client").path, ["unix:\(host.socketPath)", "Grace"])
        #expect(answer.status == 0, "\(answer.output)")
        // Echo answers with the message it was sent.
        #expect(
            answer.output.contains("Success (0)") && answer.output.contains(#""Name": "Grace""#), "\(answer.output)")
        #expect(await host.stop() == 0)
        // No host there: the client says where it tried, and exits 3.
        let nobody = try await runProgram(
            project.appendingPathComponent(".build/debug/echo-client").path, ["unix:\(host.socketPath)"])
        #expect(nobody.status == 3 && nobody.output.contains("unix:\(host.socketPath)"), "\(nobody.output)")
    }

    /// PLUGINS.md's Package.swift and Swift plugin, as a reader copies them: the package in
    /// a folder beside an Atrium checkout named atrium, the plugin as its only source.
    @Test(.disabled(if: underSanitizer, Comment(rawValue: skipReason)))
    func thePluginExampleOfTheDocsBuildsOutOfTree() async throws {
        let scratch = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        // One package and one plugin: a second of either would need a pairing this test lacks.
        let packages = try DocumentationTests.blocks(ofKind: "swift-package")
        let plugins = try DocumentationTests.blocks(ofKind: "swift-plugin")
        #expect(packages.count == 1 && plugins.count == 1, "pair each swift-package block with its plugin here")
        let package = try #require(packages.first)
        let plugin = try #require(plugins.first)
        try FileManager.default.createSymbolicLink(
            at: scratch.appendingPathComponent("atrium"), withDestinationURL: Fixtures.repositoryRoot)
        let project = scratch.appendingPathComponent("notes")
        try FileManager.default.createDirectory(
            at: project.appendingPathComponent("Sources/Notes"), withIntermediateDirectories: true)
        try package.code.write(to: project.appendingPathComponent("Package.swift"), atomically: true, encoding: .utf8)
        try plugin.code.write(
            to: project.appendingPathComponent("Sources/Notes/Notes.swift"), atomically: true, encoding: .utf8)
        try await Self.run(
            "swift build", in: project, "\(package.file):\(package.line) with \(plugin.file):\(plugin.line)")
        #expect(FileManager.default.fileExists(atPath: project.appendingPathComponent(".build/debug/libNotes.so").path))
    }

    @Test func badRequestsAreRefusedWithTheReason() async throws {
        let scratch = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let badName = try await runProgram(Self.atrium, ["new", "plugin", "Notes_1", "--language", "c"], in: scratch)
        #expect(badName.status == 64)
        #expect(badName.output.contains("'Notes_1' is not a name for a project"), "\(badName.output)")
        let noLanguage = try await runProgram(Self.atrium, ["new", "plugin", "notes"], in: scratch)
        #expect(noLanguage.status == 64)
        #expect(noLanguage.output.contains("--language"), "\(noLanguage.output)")
        let badPackage = try await runProgram(
            Self.atrium, ["new", "plugin", "notes", "--language", "c", "--package", "a b"], in: scratch)
        #expect(badPackage.status == 64)
        #expect(
            badPackage.output.contains("--package 'a b' must start with a letter or digit and hold only"),
            "\(badPackage.output)")
        // Nothing is written over: a folder with something in it is refused.
        let taken = scratch.appendingPathComponent("notes")
        try FileManager.default.createDirectory(at: taken, withIntermediateDirectories: true)
        try "mine".write(to: taken.appendingPathComponent("keep.txt"), atomically: true, encoding: .utf8)
        let overwrite = try await runProgram(Self.atrium, ["new", "plugin", "notes", "--language", "c"], in: scratch)
        #expect(overwrite.status == 64)
        #expect(overwrite.output.contains("exists and is not an empty folder"), "\(overwrite.output)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: taken.path) == ["keep.txt"])
        let dashed = try await runProgram(
            Self.atrium, ["new", "plugin", "notes", "--language", "c", "--service=-x"], in: scratch)
        #expect(dashed.status == 64)
        #expect(dashed.output.contains("--service '-x' must start with a letter or digit"), "\(dashed.output)")
        // Swift names that would clash with a module of Atrium's or Swift's, or an SDK type.
        for (arguments, clash) in [
            (["new", "plugin", "testing", "--language", "swift"], "Testing"),
            (["new", "plugin", "echo", "--language", "swift"], "Echo"),
            (["new", "plugin", "value-set", "--language", "swift"], "ValueSet"),
            (["new", "client", "atriumd", "--package", "p", "--service", "s"], "atriumd"),
        ] {
            let refused = try await runProgram(Self.atrium, arguments, in: scratch)
            #expect(refused.status == 64)
            #expect(refused.output.contains("a module, product or type named \(clash),"), "\(refused.output)")
        }
        let notACheckout = try await runProgram(
            Self.atrium, ["new", "plugin", "s", "--language", "swift", "--atrium", scratch.path], in: scratch)
        #expect(notACheckout.status == 64)
        #expect(notACheckout.output.contains("is not an Atrium source checkout"), "\(notACheckout.output)")
    }
}
