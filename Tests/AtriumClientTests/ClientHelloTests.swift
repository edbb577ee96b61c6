import AtriumTLS
import NIOCore
import NIOEmbedded
import NIOSSL
import Testing

/// The ALPN names a TLS client offers, read from its first bytes before the handshake (which
/// settings its connection gets: frames, or HTTP without a client certificate).
struct ClientHelloTests {
    /// The first bytes a swift-nio-ssl client sends, offering `protocols`.
    static func hello(offering protocols: [String]) throws -> [UInt8] {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.applicationProtocols = protocols
        configuration.certificateVerification = .none
        let channel = EmbeddedChannel()
        defer { _ = try? channel.finish() }
        try channel.pipeline.syncOperations.addHandler(
            try NIOSSLClientHandler(context: NIOSSLContext(configuration: configuration), serverHostname: nil))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        var bytes: [UInt8] = []
        while let out = try channel.readOutbound(as: ByteBuffer.self) { bytes += out.readableBytesView }
        return bytes
    }

    @Test func theNamesOfferedAreReadAndAnyCutIsIncomplete() throws {
        let http = try Self.hello(offering: ["http/1.1"])
        #expect(ClientHello.peek(http) == .offers(["http/1.1"]))
        #expect(
            ClientHello.peek(try Self.hello(offering: ["atrium/1", "http/1.1"])) == .offers(["atrium/1", "http/1.1"]))
        #expect(ClientHello.peek(try Self.hello(offering: [])) == .offers([]))
        for cut in [0, 1, 4, 5, 6, 40, http.count - 1] {
            #expect(ClientHello.peek(http.prefix(cut)) == .incomplete, "cut at \(cut)")
        }
        // The same hello cut into two records, as TLS allows: the same names.
        let body = Array(http.dropFirst(5))
        let split =
            [0x16, 0x03, 0x01, 0x00, 0x20] + body.prefix(0x20) + [0x16, 0x03, 0x01]
            + [UInt8((body.count - 0x20) >> 8), UInt8((body.count - 0x20) & 0xff)] + body.dropFirst(0x20)
        #expect(ClientHello.peek(split) == .offers(["http/1.1"]))
    }

    @Test func whatIsNotAClientHelloIsUnreadableNeverWaitedForBeyondItsBound() throws {
        // An alert record; a handshake message that is not a ClientHello; an empty record.
        #expect(ClientHello.peek([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28]) == .unreadable)
        #expect(ClientHello.peek([0x16, 0x03, 0x03, 0x00, 0x04, 0x02, 0x00, 0x00, 0x00]) == .unreadable)
        #expect(ClientHello.peek([0x16, 0x03, 0x03, 0x00, 0x00]) == .unreadable)
        // A ClientHello that claims more than the bound: refused at once, not waited for.
        #expect(ClientHello.peek([0x16, 0x03, 0x01, 0x00, 0x04, 0x01, 0x01, 0x00, 0x00]) == .unreadable)
        // Records of a few bytes each, past the bound in all: unreadable, not incomplete.
        var trickle: [UInt8] = []
        while trickle.count <= ClientHello.maxBytes { trickle += [0x16, 0x03, 0x01, 0x00, 0x01, 0x01] }
        #expect(ClientHello.peek(trickle) == .unreadable)
        // An ALPN extension whose list overruns it.
        var hello = try Self.hello(offering: ["http/1.1"])
        let alpn = try #require(hello.firstRange(of: Array("http/1.1".utf8)))
        hello[alpn.lowerBound - 1] = 200
        #expect(ClientHello.peek(hello) == .unreadable)
    }
}
