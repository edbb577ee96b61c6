import AtriumClient
import AtriumTesting
import Foundation
import Testing

/// The local socket serves only the host's user (and the group the operator names), by the
/// kernel's word on who connected (SO_PEERCRED), whatever the socket's mode. Another user is
/// played by `setpriv`, which needs root: elsewhere the test is skipped, and says why.
@Suite(.serialized)
struct LocalSocketTests {
    static let canSwitchUsers = geteuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")

    /// `atrium` run as the user nobody (uid and gid 65534).
    static func atriumAsNobody(_ arguments: [String]) async throws -> ProgramOutput {
        try await runProgram(
            "/usr/bin/setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups",
                TestHost.buildFolder.appendingPathComponent("atrium").path,
            ]
                + arguments,
            environment: ["HOME": "/tmp", "XDG_STATE_HOME": "/tmp/atrium-nobody-state"])
    }

    @Test(.enabled(if: canSwitchUsers, "playing another user needs root and /usr/bin/setpriv"))
    func anotherUserIsRefusedEvenWhenTheSocketIsOpenToAll() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests)
        // As if the operator had loosened the socket: the kernel still says who connects.
        #expect(chmod(host.socketPath, 0o666) == 0)
        let refused = try await Self.atriumAsNobody(["ping", "unix:\(host.socketPath)", "-c", "1"])
        #expect(refused.status == 3, "\(refused.output)")
        #expect(refused.output.contains("the local socket takes only the host's user"), "\(refused.output)")
        #expect(await host.waitForLog("local connection refused"))
        // The host's own user is served.
        let own = try await atrium(["ping", "unix:\(host.socketPath)", "-c", "1"])
        #expect(own.status == 0, "\(own.output)")
        #expect(await host.stop() == 0)
    }

    @Test(.enabled(if: canSwitchUsers, "playing another user needs root and /usr/bin/setpriv"))
    func theNamedGroupsMembersAreServed() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: ["--socket-group", "nogroup"])
        let attributes = try FileManager.default.attributesOfItem(atPath: host.socketPath)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o660)
        #expect((attributes[.groupOwnerAccountID] as? NSNumber)?.intValue == 65534)
        let member = try await Self.atriumAsNobody(["ping", "unix:\(host.socketPath)", "-c", "1"])
        #expect(member.status == 0, "\(member.output)")
        #expect(await host.stop() == 0)
    }
}
