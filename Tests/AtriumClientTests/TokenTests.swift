import AtriumClient
import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// Tokens for scripts (`atriumd token`), against a real atriumd that requires pairing: a
/// token serves its holder within its services, is kept only hashed, and a revoked one is cut
/// off while connected. Waits are bounded in count and time.
@Suite(.serialized)
struct TokenTests {
    static func atriumd(_ arguments: [String]) async throws -> ProgramOutput {
        try await runProgram(TestHost.buildFolder.appendingPathComponent("atriumd").path, arguments)
    }

    /// `atrium --token` (or ATRIUM_TOKEN) uses a host that requires pairing without pairing;
    /// a token is never sent to a host off loopback whose identity the client does not know
    /// (it would go to whoever answers), and the refusal says what to do.
    @Test func theToolTakesATokenAndSendsItOnlyToAKnownHost() async throws {
        let state = TLSTests.temporaryFolder("tool-tokens")
        let made = try await Self.atriumd(["token", "create", "--name", "cli", "--state-dir", state.path])
        let token = try #require(made.output.split(separator: "\n").first { $0.hasPrefix("atrium-") }.map(String.init))
        let host = try await TestHost.start(
            manifests: ClientTests.manifests, arguments: PairingTests.arguments + ["--state-dir", state.path])
        let address = "127.0.0.1:\(host.port)"
        let refused = try await atrium(["apps", address])
        #expect(refused.status != 0, "unpaired and without a token: \(refused.output)")
        let listed = try await atrium(["apps", address, "--token", token])
        #expect(listed.status == 0 && listed.output.contains("atrium.examples.echo"), "\(listed.output)")
        let fromEnvironment = try await runProgram(
            TestHost.buildFolder.appendingPathComponent("atrium").path, ["apps", address],
            environment: ["XDG_STATE_HOME": toolStateHome.path, "ATRIUM_TOKEN": token])
        #expect(fromEnvironment.status == 0, "\(fromEnvironment.output)")
        let badIdentity = try await atrium(["apps", address, "--host-identity", "xyz"])
        #expect(badIdentity.status == 64 && badIdentity.output.contains("--host-identity takes"))
        #expect(await host.stop() == 0)

        // Off loopback, an identity must be known first: refused before anything is sent (the
        // address is a documentation one, never connected to).
        let offLoopback = AtriumEndpoint(.tcp(host: "192.0.2.7", port: 7340))
        do {
            _ = try await AtriumConnection.connect(to: offLoopback, token: token, tls: try TLSTests.clientTLS())
            Issue.record("a token was sent to a host whose identity is not known")
        } catch let error as AtriumClientError {
            #expect(
                error.code == .cannotConnect && error.message.contains("a token is sent only to a host whose identity"))
        }
    }

    @Test func aTokenServesItsServicesOnlyAndARevokedOneIsCutOff() async throws {
        let state = TLSTests.temporaryFolder("tokens")
        let made = try await Self.atriumd([
            "token", "create", "--name", "backup-script", "--service", "atrium.examples.echo/atrium.echo",
            "--state-dir", state.path,
        ])
        #expect(made.status == 0, "\(made.output)")
        let token = try #require(made.output.split(separator: "\n").first { $0.hasPrefix("atrium-") }.map(String.init))
        let stored = try String(contentsOf: state.appendingPathComponent("tokens.json"), encoding: .utf8)
        #expect(!stored.contains(token), "only the token's hash is kept")
        #expect(try TLSTests.mode(state.appendingPathComponent("tokens.json")) == 0o600)
        let list = try await Self.atriumd(["token", "list", "--state-dir", state.path])
        #expect(list.output.contains("backup-script") && list.output.contains("atrium.examples.echo/atrium.echo"))
        #expect(!list.output.contains(token))

        let host = try await TestHost.start(
            manifests: ClientTests.manifests, arguments: PairingTests.arguments + ["--state-dir", state.path])
        let script = try await AtriumConnection.connect(
            to: TLSTests.endpoint(host), token: token, tls: try TLSTests.clientTLS())
        #expect(try await PairingTests.opensEcho(script) == .success, "unpaired, but it has a token")
        let roman = try await AppServiceConnection(
            appServiceName: "com.microsoft.test.cdppingpongservice",
            packageId: "5085ShawnHenry.RomanTestApp_jsjw7knzsgcce",
            connection: script
        ).openRemote()
        #expect(roman == .notAuthorized, "outside the token's services")

        do {
            _ = try await AtriumConnection.connect(
                to: TLSTests.endpoint(host), token: "atrium-" + String(repeating: "0", count: 64),
                tls: try TLSTests.clientTLS())
            Issue.record("a wrong token was accepted")
        } catch let error as AtriumClientError {
            #expect(error.code == .protocolError && error.message.contains("notAuthorized"), "\(error)")
        }

        let revoked = try await Self.atriumd(["token", "revoke", "backup-script", "--state-dir", state.path])
        #expect(revoked.status == 0, "\(revoked.output)")
        var cutOff = false
        for _ in 0..<50 {
            do {
                _ = try await script.ping(timeout: .seconds(1))
            } catch {
                cutOff = true
                break
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(cutOff, "the revoked token's connection was cut off")
        #expect(await host.waitForLog("token was revoked"))
        do {
            _ = try await AtriumConnection.connect(
                to: TLSTests.endpoint(host), token: token, tls: try TLSTests.clientTLS())
            Issue.record("a revoked token was accepted")
        } catch let error as AtriumClientError {
            #expect(error.message.contains("not valid"), "\(error)")
        }
        #expect(await host.stop() == 0)
    }

    @Test func tokenCommandsRefuseMistakesPlainly() async throws {
        let state = TLSTests.temporaryFolder("tokens")
        #expect(try await Self.atriumd(["token", "create", "--name", "x y", "--state-dir", state.path]).status == 64)
        let scope = try await Self.atriumd([
            "token", "create", "--name", "x", "--service", "echo", "--state-dir", state.path,
        ])
        #expect(scope.status == 64 && scope.output.contains("PACKAGE/SERVICE"), "\(scope.output)")
        #expect(try await Self.atriumd(["token", "create", "--name", "x", "--state-dir", state.path]).status == 0)
        let twice = try await Self.atriumd(["token", "create", "--name", "x", "--state-dir", state.path])
        #expect(twice.status != 0 && twice.output.contains("already a token named"), "\(twice.output)")
        let unknown = try await Self.atriumd(["token", "revoke", "nope", "--state-dir", state.path])
        #expect(unknown.status != 0 && unknown.output.contains("no token named"), "\(unknown.output)")
    }
}
