import AtriumClient
import AtriumProtocol
import AtriumTLS
import AtriumTesting
import AtriumValues
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Testing

/// TLS on the TCP listener (CONTRACT section 7), against a real atriumd on loopback: the
/// host's identity made once and kept, TLS with the client's own identity, plain TCP refused
/// where TLS is required, a changed host identity and a man in the middle detected.
@Suite(.serialized)
struct TLSTests {
    static func temporaryFolder(_ name: String) -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("atrium-\(name)-\(UUID().uuidString.prefix(8))")
    }

    static func clientTLS(expecting: String? = nil) throws -> ClientTLS {
        ClientTLS(
            identity: try ClientTLS.defaultIdentity(in: temporaryFolder("client")), expectedHostIdentity: expecting)
    }

    static func endpoint(_ host: TestHost) -> AtriumEndpoint {
        AtriumEndpoint(.tcp(host: "127.0.0.1", port: host.port))
    }

    static func fingerprint(ofCertificateAt file: URL) throws -> String {
        try TLSIdentity.fingerprint(of: try #require(NIOSSLCertificate.fromPEMFile(file.path).first))
    }

    static func mode(_ url: URL) throws -> Int {
        ((try FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions]) as? NSNumber)?.intValue ?? -1
    }

    @Test func theHostMakesItsIdentityAtFirstStartKeepsItPrivateAndReusesIt() async throws {
        let state = Self.temporaryFolder("state")
        let first = try await TestHost.start(manifests: ClientTests.manifests, arguments: ["--state-dir", state.path])
        let key = state.appendingPathComponent("host-key.pem")
        let certificate = state.appendingPathComponent("host-cert.pem")
        #expect(try Self.mode(state) == 0o700)
        #expect(try Self.mode(key) == 0o600)
        #expect(try Self.mode(certificate) == 0o600)
        let expected = try Self.fingerprint(ofCertificateAt: certificate)
        #expect(expected.count == 64 && expected.allSatisfy { "0123456789abcdef".contains($0) })

        let connection = try await AtriumConnection.connect(to: Self.endpoint(first), tls: try Self.clientTLS())
        #expect(connection.hostIdentity == expected, "TLS proved the identity kept in the state folder")
        #expect(connection.welcome.hostIdentity == expected)
        await connection.close()
        #expect(await first.stop() == 0)

        let second = try await TestHost.start(manifests: ClientTests.manifests, arguments: ["--state-dir", state.path])
        let again = try await AtriumConnection.connect(to: Self.endpoint(second), tls: try Self.clientTLS())
        #expect(again.hostIdentity == expected, "the same identity after a restart")
        await again.close()
        #expect(await second.stop() == 0)
    }

    @Test func aClientOverTLSIsServedAsOverPlainTCP() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: ["--tls", "required"])
        let connection = try await AtriumConnection.connect(to: Self.endpoint(host), tls: try Self.clientTLS())
        _ = try await connection.ping()
        let echo = AppServiceConnection(
            appServiceName: "atrium.echo", packageId: "atrium.examples.echo", connection: connection)
        #expect(try await echo.openRemote() == .success)
        let answer = try await echo.sendMessage(["Hello": "over TLS"])
        #expect(answer.status == .success && answer.message == ["Hello": "over TLS"])
        await connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func plainTCPIsRefusedInPlainWordsWhereOnlyTLSIsTaken() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: ["--tls", "required"])
        let client = try await TestClient.connect(port: host.port)
        try await client.send(.hello(HelloFrame(clientId: "plain")))
        guard case .error(let refusal) = try await client.next() else {
            Issue.record("no error frame for a plain client")
            return
        }
        #expect(refusal.code == .tlsRequired)
        #expect(refusal.message.contains("only TLS"))
        #expect(try await client.isClosedByHost())

        await #expect(throws: AtriumClientError.self) {
            _ = try await AtriumConnection.connect(to: Self.endpoint(host))
        }
        do {
            _ = try await AtriumConnection.connect(to: Self.endpoint(host))
        } catch let error as AtriumClientError {
            #expect(error.message.contains("tlsRequired"), "\(error.message)")
        }
        // The host is unharmed: a TLS client is served.
        let connection = try await AtriumConnection.connect(to: Self.endpoint(host), tls: try Self.clientTLS())
        _ = try await connection.ping()
        await connection.close()
        #expect(await host.waitForLog("a client spoke plain TCP where only TLS is taken"))
        #expect(await host.stop() == 0)
    }

    @Test func loopbackTakesTLSAndPlainTCPByDefault() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests)
        let plain = try await AtriumConnection.connect(to: Self.endpoint(host))
        #expect(plain.hostIdentity == nil)
        #expect(plain.welcome.hostIdentity != nil, "welcome carries the host's identity either way")
        _ = try await plain.ping()
        let secure = try await AtriumConnection.connect(to: Self.endpoint(host), tls: try Self.clientTLS())
        #expect(secure.hostIdentity == plain.welcome.hostIdentity)
        _ = try await secure.ping()
        await plain.close()
        await secure.close()
        #expect(await host.stop() == 0)
    }

    @Test func aHostWithAnotherIdentityThanTheOneKnownIsRefused() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: ["--tls", "required"])
        let known = String(repeating: "ab", count: 32)
        do {
            _ = try await AtriumConnection.connect(to: Self.endpoint(host), tls: try Self.clientTLS(expecting: known))
            Issue.record("a host with another identity was accepted")
        } catch let error as AtriumClientError {
            #expect(error.code == .hostIdentityChanged)
            #expect(error.message.contains(known), "the message says what was expected: \(error.message)")
            let actual = try Self.fingerprint(ofCertificateAt: host.stateFolder.appendingPathComponent("host-cert.pem"))
            #expect(error.message.contains(actual), "and what came instead: \(error.message)")
        }
        #expect(await host.stop() == 0)
    }

    @Test func aManInTheMiddleWithACertificateOfItsOwnIsDetected() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests)
        let proxy = try await TLSTerminatingProxy.start(forwardingTo: host.port)
        do {
            _ = try await AtriumConnection.connect(
                to: AtriumEndpoint(.tcp(host: "127.0.0.1", port: proxy.port)), tls: try Self.clientTLS())
            Issue.record("a proxy that ends TLS went unnoticed")
        } catch let error as AtriumClientError {
            #expect(error.code == .hostIdentityChanged)
            #expect(error.message.contains(proxy.identity), "\(error.message)")
        }
        try await proxy.stop()
        #expect(await host.stop() == 0)
    }

    @Test func aHostKeyOthersCanReadIsNotUsed() async throws {
        let state = Self.temporaryFolder("state")
        let first = try await TestHost.start(manifests: ClientTests.manifests, arguments: ["--state-dir", state.path])
        #expect(await first.stop() == 0)
        chmod(state.appendingPathComponent("host-key.pem").path, 0o644)
        do {
            let host = try await TestHost.start(
                manifests: ClientTests.manifests, arguments: ["--state-dir", state.path, "--tls", "required"])
            _ = await host.stop()
            Issue.record("the host started with a key others can read")
        } catch let error as TestHost.StartError {
            #expect(error.description.contains("chmod 600"), "\(error.description)")
            #expect(error.description.contains("TLS is required"), "\(error.description)")
        }
    }

    @Test func anIdentityIsUsedOnlyFromAFolderAndFilesOfItsOwnersAlone() throws {
        // A folder others may write to: they could swap the key.
        let open = Self.temporaryFolder("open")
        try FileManager.default.createDirectory(at: open, withIntermediateDirectories: true)
        chmod(open.path, 0o777)
        #expect {
            _ = try TLSIdentity.loadOrCreate(in: open, name: "client", commonName: "x")
        } throws: { "\($0)".contains("chmod 700") }

        // A key that is a link is not followed.
        let real = Self.temporaryFolder("real")
        let original = try TLSIdentity.loadOrCreate(in: real, name: "client", commonName: "x")
        let linked = Self.temporaryFolder("linked")
        try FileManager.default.createDirectory(
            at: linked, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try FileManager.default.createSymbolicLink(
            at: linked.appendingPathComponent("client-key.pem"), withDestinationURL: original.keyFile)
        #expect(throws: TLSIdentityError.self) {
            _ = try TLSIdentity.loadOrCreate(in: linked, name: "client", commonName: "x")
        }

        // A lost certificate is made again from the key: the identity is the key's.
        try FileManager.default.removeItem(at: real.appendingPathComponent("client-cert.pem"))
        let again = try TLSIdentity.loadOrCreate(in: real, name: "client", commonName: "x")
        #expect(again.fingerprint == original.fingerprint)
        #expect(try Self.mode(real.appendingPathComponent("client-cert.pem")) == 0o600)
    }

    @Test func onlyLiteralLoopbackAddressesCountAsLoopback() {
        for host in ["127.0.0.1", "127.1.2.3", "::1", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1", "localhost"] {
            #expect(isLoopbackHost(host), "\(host)")
        }
        for host in [
            "127.0.0.1.evil.example", "10.0.0.1", "0.0.0.0", "::", "::ffff:10.0.0.1", "192.0.2.1", "example.org",
        ] {
            #expect(!isLoopbackHost(host), "\(host)")
        }
    }

    @Test func theToolSpeaksTLSByDefaultAndPlainTCPOnlyToLoopback() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: ["--tls", "required"])
        let ping = try await atrium(["ping", "127.0.0.1:\(host.port)", "-c", "1"])
        #expect(ping.status == 0, "\(ping.output)")
        #expect(
            FileManager.default.fileExists(
                atPath: toolStateHome.appendingPathComponent("atrium/client-key.pem").path))
        let plain = try await atrium(["ping", "127.0.0.1:\(host.port)", "-c", "1", "--insecure"])
        #expect(plain.status == 3, "\(plain.output)")
        #expect(plain.output.contains("tlsRequired"), "\(plain.output)")
        for remoteHost in ["192.0.2.1:7340", "127.0.0.1.evil.example:7340"] {
            let remote = try await atrium(["ping", remoteHost, "-c", "1", "--insecure"])
            #expect(remote.status == 64)
            #expect(remote.output.contains("only to a loopback host"), "\(remote.output)")
        }
        #expect(await host.stop() == 0)
    }
}

/// A proxy that ends TLS with a certificate of its own and forwards the bytes in plain TCP
/// to a host on loopback: what a man in the middle would do.
final class TLSTerminatingProxy: Sendable {
    let channel: any Channel
    let identity: String
    var port: Int { channel.localAddress?.port ?? 0 }

    init(channel: any Channel, identity: String) {
        self.channel = channel
        self.identity = identity
    }

    static func start(forwardingTo target: Int) async throws -> TLSTerminatingProxy {
        let identity = try TLSIdentity.loadOrCreate(
            in: TLSTests.temporaryFolder("proxy"), name: "proxy", commonName: "proxy")
        let context = try identity.makeServerContext()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { inbound in
                inbound.eventLoop.makeCompletedFuture {
                    let check = PeerCertificateCheck()
                    try inbound.pipeline.syncOperations.addHandler(
                        NIOSSLServerHandler(context: context, customVerificationCallback: check.verify))
                    let outbound = ClientBootstrap(group: inbound.eventLoop)
                        .channelInitializer { outbound in
                            outbound.eventLoop.makeCompletedFuture {
                                try outbound.pipeline.syncOperations.addHandler(Forward(to: inbound))
                            }
                        }
                        .connect(host: "127.0.0.1", port: target)
                    try inbound.pipeline.syncOperations.addHandler(ForwardWhenConnected(outbound))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return TLSTerminatingProxy(channel: channel, identity: identity.fingerprint)
    }

    func stop() async throws { try await channel.close() }

    /// Bytes from one side written to the other; either end closing closes both.
    final class Forward: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let other: any Channel
        init(to other: any Channel) { self.other = other }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            other.writeAndFlush(unwrapInboundIn(data), promise: nil)
        }
        func channelInactive(context: ChannelHandlerContext) { other.close(promise: nil) }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
    }

    /// The client's side, once the connection to the host is made.
    final class ForwardWhenConnected: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let outbound: EventLoopFuture<any Channel>
        init(_ outbound: EventLoopFuture<any Channel>) { self.outbound = outbound }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let bytes = unwrapInboundIn(data)
            outbound.whenSuccess { $0.writeAndFlush(bytes, promise: nil) }
        }
        func channelInactive(context: ChannelHandlerContext) { outbound.whenSuccess { $0.close(promise: nil) } }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
    }
}
