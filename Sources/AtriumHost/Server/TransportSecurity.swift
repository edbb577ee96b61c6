import AtriumProtocol
import AtriumTLS
import NIOCore
import NIOSSL

/// How the TCP listener treats TLS (`atriumd --tls`). CONTRACT section 7: TLS from the
/// first byte, with the frames inside unchanged.
public enum TLSMode: String, Sendable, CaseIterable {
    /// TLS only, on an address other than loopback; TLS or plain TCP on loopback, where
    /// clients from before TLS keep working.
    case auto
    /// TLS only, on every address.
    case required
    /// TLS or plain TCP on every address. On an address other than loopback, anyone on the
    /// network can then read and change what a plain client sends: the host says so loudly.
    case optional
}

/// Whether TCP clients must be paired devices before they may open a service, launch a URI
/// or list the apps (`atriumd --pairing`). Local clients (the Unix socket) never pair.
public enum PairingMode: String, Sendable, CaseIterable {
    /// Required when the host listens on an address other than loopback (every TCP client
    /// then, from loopback too); not required on a loopback-only host, whose TCP clients are
    /// on this machine.
    case auto
    /// Required of every TCP client.
    case required
    /// Never required: every TCP client is served as before pairing existed.
    case off
}

/// What the TCP listener accepts, decided once at start.
struct TransportPolicy: Sendable {
    /// The host's TLS context, or nil when the host serves no TLS.
    let context: NIOSSLContext?
    /// The TLS context of a client that asks for HTTP (ALPN `http/1.1`): no client certificate.
    var httpContext: NIOSSLContext? = nil
    /// Whether a client may speak plain TCP.
    let plaintextAllowed: Bool

    /// Plain TCP only: the Unix socket, or a host without an identity.
    static let plaintext = TransportPolicy(context: nil, plaintextAllowed: true)
}

/// A connection's transport as its handler sees it: whether TLS carries it, and then the
/// client's identity. Confined to the connection's event loop.
final class ConnectionTransport: @unchecked Sendable {
    /// Set when the client started TLS.
    var check: PeerCertificateCheck?
    var isTLS: Bool { check != nil }
    /// Whether the listener the connection came in on serves TLS (and so HTTPS), whether or
    /// not this client speaks it.
    var listenerServesTLS = false
    /// The client's identity, once ``identify(in:)`` has read it.
    private(set) var peerIdentity: String?

    /// Reads the client's identity from the TLS session's certificate, once the handshake
    /// is done (before `hello` can arrive). From the session, not from the verification
    /// callback: a resumed TLS 1.3 session carries the certificate over without verifying it
    /// again, so the callback never runs. Nil on TLS means no certificate.
    func identify(in pipeline: ChannelPipeline.SynchronousOperations) {
        guard isTLS, let handler = try? pipeline.handler(type: NIOSSLServerHandler.self),
            let certificate = handler.peerCertificate
        else { return }
        peerIdentity = try? TLSIdentity.fingerprint(of: certificate)
    }
}

/// The first handler of a TCP connection when the host serves TLS: it looks at the first
/// byte. A TLS handshake starts with 0x16 (a handshake record), which no frame can (its
/// length would be over 369 MB, far above any frame limit), so the two never mix up. TLS:
/// the TLS handler goes in after it, with the settings of the protocol the ClientHello asks
/// for (ALPN, CONTRACT section 8): `http/1.1` without `atrium/1` makes the connection an HTTP
/// one (``TransferHTTP``), anything else carries frames. Plain TCP where TLS is required: an
/// `error` frame (`tlsRequired`) in plain words, and the connection is closed. Then it leaves.
final class TransportSniffer: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    let policy: TransportPolicy
    let transport: ConnectionTransport
    let breaches: BreachLog
    let audit: AuditLog?
    /// Where `--metrics` counts the bytes of the refusal.
    let loopMetrics: LoopMetrics?

    init(
        policy: TransportPolicy, transport: ConnectionTransport, breaches: BreachLog, audit: AuditLog?,
        loopMetrics: LoopMetrics? = nil
    ) {
        self.policy = policy
        self.transport = transport
        self.breaches = breaches
        self.audit = audit
        self.loopMetrics = loopMetrics
    }

    /// Set once plain TCP was refused: what else the client sends is dropped.
    private var refused = false
    /// What arrived of a ClientHello not yet whole.
    private var pending: ByteBuffer?
    /// Makes the connection an HTTP one, its handlers after `position` (from the server, which
    /// knows the host).
    var becomeHTTP:
        ((ChannelPipeline.SynchronousOperations, ChannelPipeline.SynchronousOperations.Position) throws -> Void)?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !refused else { return }
        var buffer = unwrapInboundIn(data)
        if var pending {
            pending.writeBuffer(&buffer)
            buffer = pending
            self.pending = nil
        }
        guard let first = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else { return }
        if first == 0x16, let tls = policy.context {
            var asksForHTTP = false
            if let becomeHTTP, policy.httpContext != nil {
                switch ClientHello.peek(buffer.readableBytesView) {
                case .incomplete:
                    // The hello timeout of the connection bounds how long this may wait.
                    pending = buffer
                    return
                case .offers(let names):
                    asksForHTTP =
                        names.contains(TLSIdentity.httpProtocol) && !names.contains(TLSIdentity.framesProtocol)
                case .unreadable:
                    break
                }
                if asksForHTTP, let http = policy.httpContext {
                    do {
                        let handler = NIOSSLServerHandler(context: http)
                        try context.pipeline.syncOperations.addHandler(handler, position: .after(self))
                        try becomeHTTP(context.pipeline.syncOperations, .after(handler))
                    } catch {
                        context.close(promise: nil)
                        return
                    }
                }
            }
            if !asksForHTTP {
                let check = PeerCertificateCheck()
                let handler = NIOSSLServerHandler(context: tls, customVerificationCallback: check.verify)
                do {
                    try context.pipeline.syncOperations.addHandler(handler, position: .after(self))
                } catch {
                    context.close(promise: nil)
                    return
                }
                transport.check = check
            }
        } else if !policy.plaintextAllowed {
            breaches.record(
                "plain TCP refused", level: .info, "a client spoke plain TCP where only TLS is taken; refused",
                metadata: ["peer": "\(context.remoteAddress.map { "\($0)" } ?? "?")"])
            let address = context.remoteAddress?.ipAddress ?? "?"
            audit?.record("tls.required", ["transport": "tcp", "address": address], stranger: address)
            let refusal = HostFrame.error(
                ErrorFrame(
                    code: .tlsRequired,
                    message:
                        "this host takes only TLS on this address: connect with TLS (atrium does, unless told --insecure)"
                ))
            refused = true
            let channel = context.channel
            var bytes = channel.allocator.buffer(for: refusal)
            bytes.writeFrame(refusal, countedIn: loopMetrics)
            channel.writeAndFlush(bytes).whenComplete { _ in channel.close(promise: nil) }
            return
        }
        context.fireChannelRead(wrapInboundOut(buffer))
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}
