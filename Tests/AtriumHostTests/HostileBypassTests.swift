import AtriumHost
import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import NIOCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Ways around the host's rules: launching through a plugin what the client may not launch
/// itself, taking over the local socket, tokens, the machine id, forging log lines, the
/// environment and the characters handlers get, and manifests or libraries other users wrote.
@Suite(.serialized)
struct HostileBypassTests {
    /// A package served by the test service that handles schemes only local clients may use.
    static let localOnlySchemes = """
        { "manifestVersion": 1, "package": "atrium.tests.files", "library": "libAtriumTestService.so",
          "services": [{ "name": "files" }], "schemes": ["file", "javascript"], "config": { "greeting": "files" } }
        """

    @Test func aPluginLaunchingForAClientGetsNoMoreThanTheClientWould() async throws {
        var manifests = Fixtures.all
        manifests["files.json"] = Self.localOnlySchemes
        let host = try await startHost(arguments: ["--deny-scheme", "atrium-test"], manifests: manifests)
        let client = try await connectedClient(host, clientId: "remote-phone")
        #expect(
            try await client.open(channel: 1, service: Fixtures.romanService, package: Fixtures.romanPackage)
                == .success)
        for (id, uri) in ["file:///etc/passwd", "javascript:alert(1)", "atrium-test://denied"].enumerated() {
            let answer = try await client.request(
                channel: 1, id: UInt64(id), ["Type": "LaunchUri", "Uri": .string(uri)])
            #expect(try answer.decoded["Type"] == "Ok")
            #expect(
                await host.waitForLog(
                    "launch \(uri) from plugin \(Fixtures.romanPackage) for client remote-phone: DeniedByRemoteSystem (7)"
                ))
        }
        // The files service never got them (it logs "files launched <uri>" when it does).
        #expect(!host.logged("files launched"))
        // A local client (the host's own user) may: Roman launches for it as a local launch.
        let local = try await TestClient.connect(unixSocket: host.socketPath)
        try await local.hello(clientId: "desk")
        #expect(
            try await local.open(channel: 1, service: Fixtures.romanService, package: Fixtures.romanPackage) == .success
        )
        _ = try await local.request(channel: 1, id: 1, ["Type": "LaunchUri", "Uri": "file:///tmp/x"])
        #expect(await host.waitForLog("files launched file:///tmp/x for desk remote false"))
        #expect(await host.stop() == 0)
    }

    @Test func anUnsafeSocketFolderIsRefusedAndTheSocketIsPrivate() async throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-sock-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: base) }
        let open = base.appendingPathComponent("open")
        try FileManager.default.createDirectory(at: open, withIntermediateDirectories: true)
        chmod(open.path, 0o777)
        var refusals = [(open, "is writable by other users (mode 777)")]
        if geteuid() == 0 {
            let foreign = base.appendingPathComponent("foreign")
            try FileManager.default.createDirectory(at: foreign, withIntermediateDirectories: true)
            chown(foreign.path, 4242, 4242)
            refusals.append((foreign, "belongs to uid 4242"))
        }
        for (folder, reason) in refusals {
            do {
                let host = try await startHost(arguments: ["--socket", folder.appendingPathComponent("s.sock").path])
                Issue.record("the host started with its socket in \(folder.path)")
                await host.stop()
            } catch let error as TestHost.StartError {
                #expect(error.description.contains(reason), "\(error)")
            }
        }
        // A folder it makes itself is 0700, and the socket 0600.
        let made = base.appendingPathComponent("made").appendingPathComponent("s.sock")
        let host = try await startHost(arguments: ["--socket", made.path])
        var info = stat()
        #expect(stat(made.deletingLastPathComponent().path, &info) == 0 && info.st_mode & 0o777 == 0o700)
        #expect(stat(made.path, &info) == 0 && info.st_mode & 0o777 == 0o600)
        #expect(await host.stop() == 0)
    }

    func welcomeOrError(_ host: TestHost, token: String?, local: Bool = false) async throws -> HostFrame? {
        let client =
            local
            ? try await TestClient.connect(unixSocket: host.socketPath) : try await TestClient.connect(port: host.port)
        try await client.send(.hello(HelloFrame(clientId: "t", token: token)))
        let frame = try await client.next()
        await client.close()
        return frame
    }

    @Test func tokensAreCheckedAndAHostWithoutTokensDoesNotPretend() async throws {
        let plain = try await startHost()
        #expect(
            try await welcomeOrError(plain, token: "anything")
                == .error(
                    ErrorFrame(
                        code: .notAuthorized,
                        message:
                            "this host has no tokens (atriumd token create, or --token-file), so it cannot check the one sent; connect without a token"
                    )))
        #expect(await plain.stop() == 0)

        let file = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-tokens-\(UUID().uuidString)")
        let token = "0123456789abcdef0123456789abcdef"
        try "# scripts\n\(token)\n".write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let host = try await startHost(arguments: ["--token-file", file.path])
        guard case .welcome = try await welcomeOrError(host, token: token) else {
            Issue.record("the right token was refused")
            return
        }
        #expect(
            try await welcomeOrError(host, token: nil)
                == .error(
                    ErrorFrame(
                        code: .notAuthorized, message: "this host requires a token in hello (ask its operator for one)")
                ))
        #expect(
            try await welcomeOrError(host, token: token + "0")
                == .error(ErrorFrame(code: .notAuthorized, message: "the token is not valid on this host")))
        // A local client needs none.
        guard case .welcome = try await welcomeOrError(host, token: nil, local: true) else {
            Issue.record("a local client without a token was refused")
            return
        }
        #expect(await host.stop() == 0)
    }

    @Test func theHostIdIsDerivedAndDoesNotRevealTheMachineId() async throws {
        let machine = "0123456789abcdef0123456789abcdef"
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("machine-id-\(UUID().uuidString)")
        try (machine + "\n").write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let id = HostConfiguration.appSpecificMachineId(machineIdFile: file.path)
        // HMAC-SHA256(key: machine id, message: Atrium's app id) as a v4 UUID, computed apart.
        let script = """
            import hmac, hashlib, uuid
            key = bytes.fromhex("\(machine)")
            app = bytes([0x6f,0x1a,0x52,0x3c,0x8e,0x27,0x4d,0x09,0xb4,0x35,0x2e,0x70,0xa1,0x5c,0xd8,0x13])
            d = bytearray(hmac.new(key, app, hashlib.sha256).digest()[:16])
            d[6] = (d[6] & 0x0f) | 0x40; d[8] = (d[8] & 0x3f) | 0x80
            print(uuid.UUID(bytes=bytes(d)))
            """
        let python = try await runProgram("/usr/bin/env", ["python3", "-c", script])
        #expect(id == python.output.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(!id.replacingOccurrences(of: "-", with: "").contains(machine))
        // The running host reports such an id, the same across restarts.
        var ids: [String] = []
        for _ in 0..<2 {
            let host = try await startHost(manifests: Fixtures.referenceManifests)
            let client = try await TestClient.connect(port: host.port)
            ids.append(try await client.hello().hostId)
            await client.close()
            #expect(await host.stop() == 0)
        }
        #expect(ids[0] == ids[1] && UUID(uuidString: ids[0]) != nil)
        if let real = try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8) {
            #expect(
                !ids[0].replacingOccurrences(of: "-", with: "").contains(
                    real.trimmingCharacters(in: .whitespacesAndNewlines)))
        }
    }

    @Test func untrustedTextCannotForgeOrFloodTheLog() async throws {
        let host = try await startHost()
        // A client id that would start a forged log line and colour the terminal.
        let forger = try await connectedClient(
            host, clientId: "x\n2026-01-01T00:00:00+0000 critical atriumd: forged\u{1b}[31m")
        try await forger.send(.launch(LaunchFrame(id: 1, uri: "atrium-test://hello\u{1b}[2J")))
        _ = try await forger.next()
        #expect(await host.waitForLog("launch atrium-test"))
        #expect(
            !host.log.contains("\ncritical atriumd: forged")
                && !host.log.contains("\n2026-01-01T00:00:00+0000 critical"))
        #expect(!host.log.unicodeScalars.contains("\u{1b}"))
        #expect(host.logged("x\\u{A}2026-01-01"))
        // A plugin that logs what a client sent it (Roman ping logs each URI it launches).
        #expect(
            try await forger.open(channel: 1, service: Fixtures.romanService, package: Fixtures.romanPackage)
                == .success)
        _ = try await forger.request(channel: 1, id: 1, ["Type": "LaunchUri", "Uri": "x:y\nFORGED-LINE"])
        #expect(await host.waitForLog("launched x:y\\u{A}FORGED-LINE"))
        #expect(!host.logged("\nFORGED-LINE"))
        // A 1 MiB unknown type: the error frame and the log line are cut.
        let verbose = try await connectedClient(host)
        let type = String(repeating: "A", count: 1 << 20)
        try await verbose.sendRaw(TestClient.frame((["type": .string(type)] as ValueSet).cborBytes()))
        guard case .error(let error) = try await verbose.next() else {
            Issue.record("no error frame")
            return
        }
        #expect(error.code == .unknownType && error.message.utf8.count < 200)
        #expect(!host.logged(String(repeating: "A", count: 1000)))
        // 2,000 refused opens: one log line, not 2,000.
        var frames: [UInt8] = []
        for channel in 0..<2000 {
            var buffer = ByteBuffer()
            buffer.writeFrame(
                ClientFrame.open(OpenFrame(channel: UInt64(channel), service: "s", package: "no.such.package")))
            frames += buffer.readableBytesView
        }
        let opening = ContinuousClock.now
        try await verbose.sendRaw(frames)
        for _ in 0..<2000 {
            guard case .opened(let opened) = try await verbose.next() else {
                Issue.record("an open went unanswered")
                return
            }
            #expect(opened.status == .appNotInstalled)
        }
        // A line each 10 s at most (the host's interval for such lines), however slowly they came.
        let windows = logIntervals(since: opening)
        #expect(host.count("no package \"no.such.package\" is installed") <= windows)
        #expect(await host.stop() == 0)
    }

    @Test func execHandlersGetACleanEnvironment() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-env-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let output = folder.appendingPathComponent("env.txt")
        let program = folder.appendingPathComponent("dump.sh")
        try "#!/bin/sh\nenv > \"\(output.path)\"\n".write(to: program, atomically: true, encoding: .utf8)
        chmod(program.path, 0o755)
        let host = try await TestHost.start(
            manifests: [
                "dump.json": """
                { "manifestVersion": 1, "package": "atrium.tests.dump", "schemes": ["atrium-dump"],
                  "launch": { "exec": ["\(program.path)", "{uri}"], "wait": true } }
                """
            ],
            environment: ["ATRIUM_TEST_SECRET": "hunter2", "AWS_SECRET_ACCESS_KEY": "k", "LANG": "C.UTF-8"])
        let client = try await connectedClient(host)
        try await client.send(.launch(LaunchFrame(id: 1, uri: "atrium-dump:x")))
        #expect(try await client.next() == .launched(LaunchedFrame(id: 1, status: .success)))
        let environment = try String(contentsOf: output, encoding: .utf8)
        #expect(environment.contains("PATH=") && environment.contains("LANG=C.UTF-8"))
        #expect(!environment.contains("hunter2") && !environment.contains("AWS_SECRET_ACCESS_KEY"))
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test(arguments: [
        ("atrium-test://paypal.com\u{202E}moc.live", "U+202E"),
        ("atrium-test://x\u{85}y", "U+0085"),
        ("atrium-test://x\u{A0}y", "U+00A0"),
        ("atrium-test://x\u{200B}y", "U+200B"),
    ])
    func urisWithInvisibleCharactersAreRefused(uri: String, named: String) async throws {
        let host = try await startHost()
        let client = try await connectedClient(host)
        try await client.send(.launch(LaunchFrame(id: 1, uri: uri)))
        guard case .launched(let launched) = try await client.next() else {
            Issue.record("no launched frame")
            return
        }
        #expect(launched.status == .protocolUnavailable)
        #expect(launched.error?.contains(named) == true, "\(launched.error ?? "")")
        #expect(!host.logged("hi launched"))
        #expect(!host.log.unicodeScalars.contains("\u{202E}"))
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func manifestsAndLibrariesOtherUsersCanWriteAreRefused() async throws {
        let marker = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-ctor-\(UUID().uuidString)")
        let library = try await PluginLoadingTests().buildPlugin(
            named: "Ctor",
            source: """
                #include <stdio.h>
                #include "atrium_plugin.h"
                __attribute__((constructor)) static void ran(void) { FILE *f = fopen("\(marker.path)", "w"); if (f) fclose(f); }
                static int32_t create(const atrium_host_api *h, const char *c, void **i) { (void)h; (void)c; *i = 0; return 0; }
                static const atrium_plugin p = { sizeof(atrium_plugin), 1, 0, "Ctor", "0", 0, create, 0, 0, 0, 0, 0, 0 };
                const atrium_plugin *atrium_plugin_entry_v1(void) { return &p; }
                """)
        let atriumd = TestHost.buildFolder.appendingPathComponent("atriumd").path
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-strict-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try PluginLoadingTests().manifest("atrium.tests.ctor", library)
            .write(to: folder.appendingPathComponent("ctor.json"), atomically: true, encoding: .utf8)

        // --check --no-load runs no code of the library; --check does, and says so.
        let noLoad = try await runProgram(atriumd, ["--check", "--no-load", "--manifests", folder.path])
        #expect(noLoad.status == 0 && noLoad.output.contains("not loaded"), "\(noLoad.output)")
        #expect(!FileManager.default.fileExists(atPath: marker.path))
        let loaded = try await runProgram(atriumd, ["--check", "--manifests", folder.path])
        #expect(loaded.output.contains("which runs their initialisers"))
        #expect(FileManager.default.fileExists(atPath: marker.path))
        try? FileManager.default.removeItem(at: marker)

        // A library in a folder anyone may write to is refused, naming the folder.
        chmod(library.deletingLastPathComponent().path, 0o777)
        let unsafeLibrary = try await runProgram(atriumd, ["--check", "--manifests", folder.path])
        #expect(unsafeLibrary.status == 1)
        #expect(
            unsafeLibrary.output.contains(
                "the folder of the plugin library \(library.deletingLastPathComponent().path) is writable by other users"
            ))
        #expect(!FileManager.default.fileExists(atPath: marker.path), "the unsafe library was not loaded")
        chmod(library.deletingLastPathComponent().path, 0o755)

        // A manifest anyone may write is skipped with the reason; the others still load.
        try Fixtures.referenceManifests["echo.json"]!.write(
            to: folder.appendingPathComponent("echo.json"), atomically: true, encoding: .utf8)
        chmod(folder.appendingPathComponent("ctor.json").path, 0o666)
        let unsafeManifest = try await runProgram(atriumd, ["--check", "--no-load", "--manifests", folder.path])
        #expect(
            unsafeManifest.output.contains(
                "ctor.json: the manifest \(folder.path)/ctor.json is writable by other users (mode 666)"))
        #expect(unsafeManifest.output.contains("✓ echo.json"))
        // --no-strict-modes takes them as they are.
        let lax = try await runProgram(
            atriumd, ["--check", "--no-load", "--no-strict-modes", "--manifests", folder.path])
        #expect(lax.status == 0, "\(lax.output)")
        // A manifests folder anyone may write stops the host from starting.
        chmod(folder.path, 0o777)
        let host = try? await TestHost.start(manifestsFolder: folder)
        #expect(host == nil)
        chmod(folder.path, 0o755)
    }

    /// A folder on the way to a library or a manifest that another user owns, or may write to,
    /// lets them put another file in its place (a link repointed, a folder renamed): refused,
    /// naming the folder, as sshd's StrictModes does. A sticky folder (/tmp) is fine when the
    /// entry on the way is root's or the host user's.
    @Test(.enabled(if: geteuid() == 0, "playing another user's folder needs root (chown)"))
    func foldersOtherUsersControlOnTheWayAreRefused() async throws {
        let atriumd = TestHost.buildFolder.appendingPathComponent("atriumd").path
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-way-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let shared = root.appendingPathComponent("shared")
        let plugins = shared.appendingPathComponent("atrium/plugins")
        try FileManager.default.createDirectory(at: plugins, withIntermediateDirectories: true)
        chmod(root.path, 0o755)
        let library = plugins.appendingPathComponent("libEcho.so")
        try FileManager.default.copyItem(at: TestHost.buildFolder.appendingPathComponent("libEcho.so"), to: library)
        let manifests = root.appendingPathComponent("m")
        try FileManager.default.createDirectory(at: manifests, withIntermediateDirectories: true)
        try """
        { "manifestVersion": 1, "package": "atrium.tests.way", "library": "\(library.path)",
          "services": [{ "name": "s" }] }
        """.write(to: manifests.appendingPathComponent("way.json"), atomically: true, encoding: .utf8)
        let trusted = try await runProgram(atriumd, ["--check", "--no-load", "--manifests", manifests.path])
        #expect(trusted.status == 0, "\(trusted.output)")
        // The folder above the library's belongs to someone else, who could rename it.
        chown(shared.path, 65534, 65534)
        let libraryRefused = try await runProgram(atriumd, ["--check", "--no-load", "--manifests", manifests.path])
        #expect(libraryRefused.status == 1, "\(libraryRefused.output)")
        #expect(
            libraryRefused.output.contains(
                "the folder \(shared.path) on the way to the plugin library \(library.path) belongs to uid 65534"),
            "\(libraryRefused.output)")

        // A manifest that is a link into a folder someone else owns.
        let theirs = shared.appendingPathComponent("theirs")
        try FileManager.default.createDirectory(at: theirs, withIntermediateDirectories: true)
        chown(theirs.path, 65534, 65534)
        let linked = root.appendingPathComponent("linked")
        try FileManager.default.createDirectory(at: linked, withIntermediateDirectories: true)
        try Fixtures.referenceManifests["echo.json"]!.write(
            to: theirs.appendingPathComponent("echo.json"), atomically: true, encoding: .utf8)
        try FileManager.default.createSymbolicLink(
            atPath: linked.appendingPathComponent("echo.json").path,
            withDestinationPath: theirs.appendingPathComponent("echo.json").path)
        let link = try await runProgram(atriumd, ["--check", "--no-load", "--manifests", linked.path])
        #expect(link.status == 1 && link.output.contains("on the way to the manifest"), "\(link.output)")

        // A sticky folder anyone may write to, with a folder of root's in it: fine.
        let sticky = root.appendingPathComponent("sticky")
        let mine = sticky.appendingPathComponent("mine")
        try FileManager.default.createDirectory(at: mine, withIntermediateDirectories: true)
        chmod(sticky.path, 0o1777)
        try Fixtures.referenceManifests["echo.json"]!.write(
            to: mine.appendingPathComponent("echo.json"), atomically: true, encoding: .utf8)
        let inSticky = try await runProgram(atriumd, ["--check", "--no-load", "--manifests", mine.path])
        #expect(inSticky.status == 0, "\(inSticky.output)")
        // ... but not one of someone else's there.
        chown(mine.path, 65534, 65534)
        let theirsInSticky = try await runProgram(atriumd, ["--check", "--no-load", "--manifests", mine.path])
        #expect(theirsInSticky.status != 0, "\(theirsInSticky.output)")

        // A manifest far over the size limit is refused by its size, not read whole.
        let huge = root.appendingPathComponent("huge")
        try FileManager.default.createDirectory(at: huge, withIntermediateDirectories: true)
        let file = huge.appendingPathComponent("huge.json")
        _ = FileManager.default.createFile(atPath: file.path, contents: nil)
        truncate(file.path, 3 << 30)
        let big = try await runProgram(atriumd, ["--check", "--no-load", "--manifests", huge.path])
        #expect(big.output.contains("is 3221225472 bytes; a manifest may be at most"), "\(big.output)")
    }
}
