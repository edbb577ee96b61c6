import AtriumClient
import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// Launch-only packages whose scheme is handled by a program (`launch.exec`).
@Suite(.serialized)
struct ExecLaunchTests {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-exec-\(UUID().uuidString)")

    /// A program that writes its first argument to `output`, after `delay` seconds.
    /// A program that writes its first argument to `output`; with `release`, only once that
    /// file exists (it waits at most 10 s for it).
    func writer(release: URL? = nil) throws -> (program: URL, output: URL) {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let output = folder.appendingPathComponent("uri-\(UUID().uuidString).txt")
        let program = folder.appendingPathComponent("writer-\(UUID().uuidString).sh")
        let wait = release.map { "for i in $(seq 200); do [ -e \"\($0.path)\" ] && break; sleep 0.05; done" } ?? ""
        try """
        #!/bin/sh
        \(wait)
        printf '%s' "$1" > "\(output.path).part" && mv "\(output.path).part" "\(output.path)"
        echo "handled one launch"
        """.write(to: program, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: program.path)
        return (program, output)
    }

    func manifest(_ package: String, scheme: String, exec: [String], wait: Bool = false, timeout: Double = 10) -> String
    {
        let words = exec.map { "\"\($0)\"" }.joined(separator: ", ")
        return """
            { "manifestVersion": 1, "package": "\(package)", "schemes": ["\(scheme)"],
              "launch": { "exec": [\(words)], "wait": \(wait), "timeoutSeconds": \(timeout) } }
            """
    }

    func contents(_ file: URL, within seconds: Double = 5) async throws -> String? {
        var text: String?
        _ = await eventually(within: .seconds(seconds)) {
            text = try? String(contentsOf: file, encoding: .utf8)
            return text != nil
        }
        return text
    }

    /// Children of `pid` that have ended but were not reaped.
    func zombies(of pid: Int32) -> [String] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { entry -> String? in
            guard Int32(entry) != nil, let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return nil }
            let fields = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
            guard fields.count > 2, fields[0] == "Z", Int32(fields[1]) == pid else { return nil }
            return stat
        }
    }

    @Test func theURIArrivesAsOneArgumentAndNothingIsExecuted() async throws {
        let (program, output) = try writer()
        let marker = folder.appendingPathComponent("pwned")
        let host = try await TestHost.start(manifests: [
            "writer.json": manifest(
                "atrium.tests.writer", scheme: "atrium-exec", exec: [program.path, "{uri}"], wait: true)
        ])
        let connection = try await AtriumConnection.connect(to: AtriumEndpoint("127.0.0.1:\(host.port)")!)
        let uri =
            #"atrium-exec://x?a=1 b&c="q" 'r' $(touch \#(marker.path)) ; touch \#(marker.path) `touch \#(marker.path)`"#
        let result = try await RemoteLauncher(connection: connection).launchUri(uri)
        #expect(result.status == .success, "\(String(describing: result.error))")
        #expect(try await contents(output) == uri)
        #expect(!FileManager.default.fileExists(atPath: marker.path), "nothing in the URI was run")
        // The output is read from its pipe on its own, and may be logged after the answer.
        #expect(await host.waitForLog("handled one launch"), "the program's output is logged")
        await connection.close()
        #expect(await host.stop() == 0)
    }

    /// As LAUNCHING.md says: a program gets the URI only; a launch's data is checked and not
    /// passed on (its standard input is empty, and nothing of the data is in its environment).
    @Test func aProgramGetsTheURIAndNotTheData() async throws {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let output = folder.appendingPathComponent("seen.txt")
        let program = folder.appendingPathComponent("seen.sh")
        try """
        #!/bin/sh
        { printf 'uri=%s\\n' "$1"; printf 'stdin=%s\\n' "$(cat)"; env; } > "\(output.path).part"
        mv "\(output.path).part" "\(output.path)"
        """.write(to: program, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: program.path)
        let host = try await TestHost.start(manifests: [
            "seen.json": manifest(
                "atrium.tests.seen", scheme: "atrium-seen", exec: [program.path, "{uri}"], wait: true)
        ])
        let connection = try await AtriumConnection.connect(to: AtriumEndpoint("127.0.0.1:\(host.port)")!)
        var options = RemoteLauncher.Options()
        options.data = ["Secret": "in-the-data-only"]
        let result = try await RemoteLauncher(connection: connection).launchUri("atrium-seen://page", options: options)
        #expect(result.status == .success, "\(String(describing: result.error))")
        let seen = try #require(try await contents(output))
        #expect(seen.contains("uri=atrium-seen://page\nstdin=\n"), "\(seen)")
        #expect(!seen.contains("in-the-data-only"), "\(seen)")
        await connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func aProgramThatRunsOnSucceedsAtOnceAndIsReaped() async throws {
        // The program writes only once the test says so, after the launch was answered: a
        // launch that waited for it would not be answered first.
        let release = folder.appendingPathComponent("release-\(UUID().uuidString)")
        let (program, output) = try writer(release: release)
        let host = try await TestHost.start(manifests: [
            "writer.json": manifest("atrium.tests.runner", scheme: "atrium-run", exec: [program.path, "{uri}"])
        ])
        let connection = try await AtriumConnection.connect(to: AtriumEndpoint("127.0.0.1:\(host.port)")!)
        let result = try await RemoteLauncher(connection: connection).launchUri("atrium-run:go")
        #expect(result.status == .success)
        #expect(!FileManager.default.fileExists(atPath: output.path), "the launch did not wait for the program")
        #expect(FileManager.default.createFile(atPath: release.path, contents: nil))
        #expect(try await contents(output) == "atrium-run:go")
        var left: [String] = []
        _ = await eventually(within: .seconds(10)) {
            left = zombies(of: host.process.processIdentifier)
            return left.isEmpty
        }
        #expect(left.isEmpty, "no zombie is left when the program ends: \(left)")
        #expect(await host.waitForLog("ended with status 0"))
        await connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func waitedProgramsThatHangFailOrDoNotExist() async throws {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let host = try await TestHost.start(manifests: [
            "hang.json": manifest(
                "atrium.tests.hang", scheme: "atrium-hang", exec: ["sleep", "30"], wait: true, timeout: 0.5),
            "fail.json": manifest("atrium.tests.fail", scheme: "atrium-fail", exec: ["/bin/false"], wait: true),
            "ok.json": manifest("atrium.tests.ok", scheme: "atrium-ok", exec: ["true", "{uri}"], wait: true),
            "none.json": manifest("atrium.tests.none", scheme: "atrium-none", exec: ["/no/such/program", "{uri}"]),
        ])
        let launcher = RemoteLauncher(
            connection: try await AtriumConnection.connect(to: AtriumEndpoint("127.0.0.1:\(host.port)")!))
        let hung = try await launcher.launchUri("atrium-hang:x")
        #expect(hung.status == .unknown)
        #expect(hung.error == "sleep did not finish within 0.5 s and was killed")
        let failed = try await launcher.launchUri("atrium-fail:x")
        #expect(failed.status == .unknown && failed.error == "false exited with status 1")
        #expect(try await launcher.launchUri("atrium-ok:x").status == .success)
        // A remote client is not told the host's paths; the log has them, and a local client.
        let missing = try await launcher.launchUri("atrium-none:x")
        #expect(missing.status == .appUnavailable)
        #expect(
            missing.error == #"package "atrium.tests.none" could not start its program (the host's log says why)"#)
        #expect(await host.waitForLog("the program /no/such/program was not found or is not executable"))
        let local = RemoteLauncher(
            connection: try await AtriumConnection.connect(to: AtriumEndpoint(.unix(path: host.socketPath))))
        let missingLocally = try await local.launchUri("atrium-none:x")
        #expect(missingLocally.status == .appUnavailable)
        #expect(missingLocally.error == "the program /no/such/program was not found or is not executable")
        await local.connection.close()
        await launcher.connection.close()
        #expect(await host.stop() == 0)
        try? FileManager.default.removeItem(at: folder)
    }
}
