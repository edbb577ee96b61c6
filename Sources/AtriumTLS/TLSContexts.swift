public import NIOCore
public import NIOSSL

extension TLSIdentity {
    /// A server context: TLS 1.3 only, presenting this identity, and asking every client
    /// for a certificate of its own (mutual TLS). Which client certificates are accepted is
    /// not the context's business: trust comes from pairing, so the handler's verification
    /// callback (``PeerCertificateCheck``) accepts any, and notes whose it is.
    public func makeServerContext() throws -> NIOSSLContext {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(certificate)], privateKey: .privateKey(privateKey))
        configuration.minimumTLSVersion = .tlsv13
        configuration.certificateVerification = .noHostnameVerification
        configuration.applicationProtocols = [Self.framesProtocol]
        configuration.shutdownTimeout = Self.closeNotifyTimeout
        return try NIOSSLContext(configuration: configuration)
    }

    /// The server context of a connection whose client asked for HTTP (ALPN `http/1.1`,
    /// CONTRACT section 8): presenting this identity, asking for no client certificate (a
    /// transfer's bearer admits the client), and taking TLS 1.2 too, which the downloaders of
    /// older systems (Windows 10's BITS and BackgroundDownloader) still speak.
    public func makeHTTPServerContext() throws -> NIOSSLContext {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(certificate)], privateKey: .privateKey(privateKey))
        configuration.minimumTLSVersion = .tlsv12
        configuration.certificateVerification = .none
        configuration.applicationProtocols = [Self.httpProtocol]
        configuration.shutdownTimeout = Self.closeNotifyTimeout
        return try NIOSSLContext(configuration: configuration)
    }

    /// The ALPN name of Atrium's frames, and of HTTP/1.1.
    public static let framesProtocol = "atrium/1"
    public static let httpProtocol = "http/1.1"

    /// A client context: TLS 1.3 only, presenting this identity; the host's certificate is
    /// checked by the handler's verification callback (``PeerCertificateCheck``).
    public func makeClientContext() throws -> NIOSSLContext {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv13
        configuration.certificateVerification = .noHostnameVerification
        configuration.certificateChain = [.certificate(certificate)]
        configuration.privateKey = .privateKey(privateKey)
        configuration.applicationProtocols = [Self.framesProtocol]
        configuration.shutdownTimeout = Self.closeNotifyTimeout
        return configuration.makeContext()
    }

    /// How long a closing side waits for the peer's close_notify before it closes anyway:
    /// a round trip takes milliseconds, and a peer that never answers (a client cut off, or
    /// one that simply drops the connection) must not hold its connection for long.
    public static let closeNotifyTimeout = TimeAmount.seconds(1)
}

extension TLSConfiguration {
    fileprivate func makeContext() -> NIOSSLContext {
        // A configuration with a certificate and key that loaded cannot fail to make a context.
        try! NIOSSLContext(configuration: self)
    }
}

/// The verification side of a TLS handshake whose trust comes from pairing: the peer's
/// certificate is accepted whatever signed it (the handshake itself proves the peer holds
/// its key), and its identity is noted for the connection. When an identity is expected
/// (a known host), any other fails the handshake, and ``mismatch`` says what came instead.
/// Used on one connection's event loop only.
public final class PeerCertificateCheck: @unchecked Sendable {
    /// The peer's identity, once the handshake has seen its certificate.
    public private(set) var identity: String?
    /// The identity that came when another was expected.
    public private(set) var mismatch: String?
    /// The identity expected, if one was.
    public let expected: String?

    public init(expecting expected: String? = nil) {
        self.expected = expected
    }

    /// The callback for `NIOSSLServerHandler` or `NIOSSLClientHandler`.
    public func verify(_ certificates: [NIOSSLCertificate], _ promise: EventLoopPromise<NIOSSLVerificationResult>) {
        guard let leaf = certificates.first, let fingerprint = try? TLSIdentity.fingerprint(of: leaf) else {
            promise.succeed(.failed)
            return
        }
        if let expected, expected != fingerprint {
            mismatch = fingerprint
            promise.succeed(.failed)
            return
        }
        identity = fingerprint
        promise.succeed(.certificateVerified)
    }
}
