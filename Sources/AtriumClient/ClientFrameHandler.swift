import AtriumProtocol
import AtriumTLS
import Foundation
import NIOCore
import NIOSSL

/// The pipeline end of a client connection: the handshake first, then every frame goes to the
/// ``AtriumConnection``.
final class ClientFrameHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HostFrame

    private let lock = NSLock()
    private var connection: AtriumConnection?
    private var handshake: CheckedContinuation<WelcomeFrame, any Error>?
    private var early: [HostFrame] = []
    /// The TLS handshake's check of the host's certificate, when TLS is spoken.
    let check: PeerCertificateCheck?
    let endpoint: AtriumEndpoint

    init(check: PeerCertificateCheck?, endpoint: AtriumEndpoint) {
        self.check = check
        self.endpoint = endpoint
    }

    func handshake(on channel: any Channel, hello: HelloFrame, timeout: Duration) async throws -> WelcomeFrame {
        try await withCheckedThrowingContinuation { continuation in
            // The connection may have failed already (a TLS handshake runs as soon as it is
            // connected): then that is the answer.
            let failed = lock.withLock { () -> (any Error)? in
                if let failure = earlyFailure { return failure }
                handshake = continuation
                return nil
            }
            if let failed {
                continuation.resume(throwing: failed)
                return
            }
            channel.eventLoop.scheduleTask(in: .init(timeout)) {
                self.finishHandshake(
                    .failure(AtriumClientError(.timedOut, "the host did not answer hello within \(timeout)")))
            }
            channel.writeAndFlush(ClientFrame.hello(hello), promise: nil)
        }
    }

    private func finishHandshake(_ result: Result<WelcomeFrame, any Error>) {
        let waiting = lock.withLock { () -> CheckedContinuation<WelcomeFrame, any Error>? in
            defer { handshake = nil }
            if handshake == nil, connection == nil, earlyFailure == nil, case .failure(let error) = result {
                earlyFailure = error
            }
            return handshake
        }
        waiting?.resume(with: result)
    }

    /// The first failure before `hello` was sent (kept for the handshake to answer with).
    private var earlyFailure: (any Error)?

    func attach(_ connection: AtriumConnection) {
        let pending = lock.withLock { () -> [HostFrame] in
            self.connection = connection
            defer { early.removeAll() }
            return early
        }
        for frame in pending { connection.received(frame) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        if case .welcome(let welcome) = frame {
            finishHandshake(.success(welcome))
            return
        }
        // An error before `welcome` is the host's refusal, also when it came before `hello`
        // was even sent (a host that refuses at once, say, a local user it does not serve).
        if case .error(let error) = frame, lock.withLock({ connection == nil }) {
            finishHandshake(
                .failure(
                    AtriumClientError(
                        .protocolError, "the host refused the connection: \(error.code): \(error.message)")))
            return
        }
        let target = lock.withLock { () -> AtriumConnection? in
            if connection == nil { early.append(frame) }
            return connection
        }
        target?.received(frame)
    }

    func channelInactive(context: ChannelHandlerContext) {
        finishHandshake(
            .failure(AtriumClientError(.hostWentAway, "the host closed the connection during the handshake")))
        lock.withLock { connection }?.ended()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let check, let mismatch = check.mismatch, let expected = check.expected {
            finishHandshake(
                .failure(
                    AtriumClientError(
                        .hostIdentityChanged,
                        "\(endpoint) is not the host you know: it presented the identity \(mismatch), but was known as \(expected). If the host made a new key on purpose, pair again and forget the old one (atrium pair HOST --forget); otherwise someone may be in between"
                    )))
        } else if check != nil, error is NIOSSLError || error is BoringSSLError {
            finishHandshake(
                .failure(
                    AtriumClientError(
                        .cannotConnect,
                        "the TLS handshake with \(endpoint) failed: \(error). Does the host speak TLS there (atriumd --tls), or does it take plain TCP only (atrium --insecure, on loopback)?"
                    )))
        }
        context.close(promise: nil)
    }
}
