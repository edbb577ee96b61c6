import AtriumClient
import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// The host's launch policy, scheme defaults, URI limits, and the desktop's handlers.
@Suite(.serialized)
struct LaunchPolicyTests {

    static var manifests: [String: String] {
        var manifests = LaunchTests.manifests
        manifests["files.json"] = """
            { "manifestVersion": 1, "package": "atrium.tests.files", "library": "libAtriumTestService.so",
              "schemes": ["file", "javascript", "atrium-denied"], "config": { "greeting": "files" } }
            """
        return manifests
    }

    @Test func remoteClientsMayLaunchOnlyWhatThePolicyAllows() async throws {
        let host = try await TestHost.start(
            manifests: Self.manifests,
            arguments: ["--deny-scheme", "atrium-denied", "--allow-scheme", "javascript", "--max-uri-length", "40"]
        )
        let remote = RemoteLauncher(
            connection: try await AtriumConnection.connect(
                to: AtriumEndpoint("127.0.0.1:\(host.port)")!, clientId: "phone"))
        let file = try await remote.launchUri("file:///etc/passwd")
        #expect(file.status == .deniedByRemoteSystem)
        #expect(
            file.error
                == "the scheme file is local-only; remote clients may launch it only if the host's policy allows it")
        #expect(
            await host.waitForLog("launch file:///etc/passwd from client phone: DeniedByRemoteSystem (7)"),
            "logged with the client and the URI")
        let denied = try await remote.launchUri("atrium-denied:x")
        #expect(
            denied.status == .deniedByRemoteSystem
                && denied.error == "the scheme atrium-denied is denied by the host's launch policy")
        #expect(try await remote.launchUri("javascript:alert(1)").status == .success, "allowed explicitly")
        let long = try await remote.launchUri("atrium-test://" + String(repeating: "x", count: 40))
        #expect(long.status == .deniedByRemoteSystem && long.error == "the URI is 54 characters long; the limit is 40")

        // The local socket is not limited by the allowlist.
        let local = RemoteLauncher(
            connection: try await AtriumConnection.connect(to: AtriumEndpoint("unix:\(host.socketPath)")!))
        #expect(try await local.launchUri("file:///tmp/x").status == .success)
        await remote.connection.close()
        await local.connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func theConfiguredDefaultWinsAmongSeveralHandlers() async throws {
        let host = try await TestHost.start(
            manifests: Self.manifests, arguments: ["--scheme-default", "atrium-test=atrium.tests.launcher.b"])
        let launcher = RemoteLauncher(
            connection: try await AtriumConnection.connect(to: AtriumEndpoint("127.0.0.1:\(host.port)")!))
        #expect(try await launcher.launchUri("atrium-test://default").status == .success)
        #expect(await host.waitForLog("second launched atrium-test://default"))
        #expect(await host.waitForLog("chose atrium.tests.launcher.b, the host's default for the scheme"))
        await launcher.connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func badPolicyOptionsAreRefused() async throws {
        let atriumd = TestHost.buildFolder.appendingPathComponent("atriumd").path
        let pair = try await runProgram(atriumd, ["--scheme-default", "nopackage", "--check"])
        #expect(pair.status != 0 && pair.output.contains("--scheme-default takes SCHEME=PACKAGE"))
        let scheme = try await runProgram(atriumd, ["--allow-scheme", "1bad", "--check"])
        #expect(scheme.status != 0 && scheme.output.contains("'1bad' is not a URI scheme"))
    }

    @Test func undeclaredSchemesGoToTheDesktopsHandlerWhenAsked() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-xdg-\(UUID().uuidString)")
        let config = root.appendingPathComponent("config")
        let applications = root.appendingPathComponent("data/applications")
        try FileManager.default.createDirectory(at: config, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: applications, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let output = root.appendingPathComponent("got.txt")
        let program = root.appendingPathComponent("handler.sh")
        try "#!/bin/sh\nprintf '%s' \"$2\" > \"\(output.path).part\" && mv \"\(output.path).part\" \"\(output.path)\"\n"
            .write(to: program, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: program.path)
        try "[Default Applications]\nx-scheme-handler/atrium-desktop=atrium-handler.desktop;\n"
            .write(to: config.appendingPathComponent("mimeapps.list"), atomically: true, encoding: .utf8)
        try "[Desktop Entry]\nType=Application\nName=Handler\nExec=\"\(program.path)\" --open %u\n"
            .write(to: applications.appendingPathComponent("atrium-handler.desktop"), atomically: true, encoding: .utf8)
        let environment = [
            "XDG_CONFIG_HOME": config.path, "XDG_DATA_HOME": root.appendingPathComponent("data").path,
            "XDG_CONFIG_DIRS": root.path + "/none", "XDG_DATA_DIRS": root.path + "/none",
        ]

        let host = try await TestHost.start(
            manifests: Self.manifests, arguments: ["--system-handlers"], environment: environment)
        let local = RemoteLauncher(
            connection: try await AtriumConnection.connect(to: AtriumEndpoint("unix:\(host.socketPath)")!))
        let desktop = try await local.launchUri("atrium-desktop://page 1")
        #expect(desktop.status == .success, "\(String(describing: desktop.error))\n\(host.log)")
        var got: String?
        _ = await eventually(within: .seconds(10)) {
            got = try? String(contentsOf: output, encoding: .utf8)
            return got != nil
        }
        #expect(got == "atrium-desktop://page 1")
        #expect(try await local.launchUri("atrium-nothing:x").status == .protocolUnavailable)
        let remote = RemoteLauncher(
            connection: try await AtriumConnection.connect(to: AtriumEndpoint("127.0.0.1:\(host.port)")!))
        #expect(
            try await remote.launchUri("atrium-desktop://x").status == .deniedByRemoteSystem,
            "remote clients need --allow-scheme")
        await local.connection.close()
        await remote.connection.close()
        #expect(await host.stop() == 0)

        let off = try await TestHost.start(manifests: Self.manifests, environment: environment)
        let again = RemoteLauncher(
            connection: try await AtriumConnection.connect(to: AtriumEndpoint("unix:\(off.socketPath)")!))
        #expect(try await again.launchUri("atrium-desktop://x").status == .protocolUnavailable, "off by default")
        await again.connection.close()
        #expect(await off.stop() == 0)
    }
}
