public import AtriumProtocol
import AtriumValues
import Foundation
public import NIOCore
import NIOPosix
import Synchronization

/// Where a host listens: `host:port` (TCP, a remote client), a bare `host` (port 7340), or
/// `unix:/path/to/atriumd.sock` (the host's local socket).
public struct AtriumEndpoint: Sendable, Hashable, LosslessStringConvertible {
    public enum Address: Sendable, Hashable {
        case tcp(host: String, port: Int)
        case unix(path: String)
    }

    public var address: Address

    public init(_ address: Address) { self.address = address }

    /// Parses `host:port`, `host`, `[::1]:7340` or `unix:/path`; nil for anything else.
    public init?(_ text: String) {
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst("unix:".count))
            guard !path.isEmpty else { return nil }
            address = .unix(path: path)
            return
        }
        var host = text
        var port = 7340
        if let colon = text.lastIndex(of: ":"), !text.hasSuffix("]") {
            guard let parsed = Int(text[text.index(after: colon)...]), (1...65535).contains(parsed) else { return nil }
            port = parsed
            host = String(text[..<colon])
        }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty, !host.contains(where: { "/= ".contains($0) }) else { return nil }
        address = .tcp(host: host, port: port)
    }

    public var description: String {
        switch address {
        case .tcp(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        case .unix(let path): "unix:\(path)"
        }
    }
}

/// One connection to an Atrium host, shared by any number of ``AppServiceConnection``s (each
/// is a channel on it), with the host-level calls: ``ping()``, ``apps()``.
///
/// All methods are safe to call from any task. Every call has a timeout, honours
/// cancellation (a cancelled call leaves nothing behind; a late answer is dropped), and fails
/// with ``AtriumClientError`` (`hostWentAway`, with the host's reason when it sent one) when
/// the connection ends.
public final class AtriumConnection: Sendable {
    /// The host's `welcome`: its identity and limits.
    public let welcome: WelcomeFrame
    /// How long calls wait for an answer unless told otherwise.
    public let defaultTimeout: Duration
    let channel: any Channel
    let state: Mutex<ClientState>

    /// What a call waits for.
    enum WaitKey: Hashable {
        case opened(UInt64)
        case response(UInt64, UInt64)
        case pong(UInt64)
        case apps(UInt64)
        case launched(UInt64)
    }

    struct Waiter {
        var continuation: CheckedContinuation<HostFrame, any Error>
        var timer: Scheduled<Void>?
    }

    struct ClientState {
        var nextNumber: UInt64 = 1
        var waiters: [WaitKey: Waiter] = [:]
        var channels: [UInt64: ChannelEvents] = [:]
        /// Set when the connection has ended: every call fails with it.
        var ended: AtriumClientError?
        /// The last `error` frame from the host, the likely reason for an end.
        var lastError: ErrorFrame?
    }

    /// Where a channel's events go: the service's messages, and its closing.
    struct ChannelEvents {
        var requests: AsyncStream<AppServiceRequest>.Continuation
        var closed: AsyncStream<AppServiceClosedStatus>.Continuation
    }

    /// Connects, says `hello` (as `clientId`, a random one by default), and waits for `welcome`.
    ///
    /// - Throws: ``AtriumClientError`` `cannotConnect` (with the reason and the address),
    ///   `timedOut`, or `protocolError` when the host refuses the client.
    public static func connect(
        to endpoint: AtriumEndpoint,
        clientId: String? = nil,
        clientName: String? = nil,
        token: String? = nil,
        timeout: Duration = .seconds(10),
        group: (any EventLoopGroup)? = nil
    ) async throws -> AtriumConnection {
        let handler = ClientFrameHandler()
        let bootstrap = ClientBootstrap(group: group ?? MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.init(timeout))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandlers([
                        ByteToMessageHandler(FrameDecoder<HostFrame>(maxFrameBytes: 64 << 20)),
                        MessageToByteHandler(FrameEncoder<ClientFrame>()),
                        handler,
                    ])
                }
            }
        let channel: any Channel
        do {
            switch endpoint.address {
            case .tcp(let host, let port): channel = try await bootstrap.connect(host: host, port: port).get()
            case .unix(let path): channel = try await bootstrap.connect(unixDomainSocketPath: path).get()
            }
        } catch {
            let text = "\(error)"
            let reason =
                ["Connection refused", "No such file or directory", "timed out", "Permission denied"]
                .first { text.localizedCaseInsensitiveContains($0) }?.lowercased() ?? text
            throw AtriumClientError(
                .cannotConnect,
                "cannot connect to \(endpoint): \(reason). Is atriumd running there (and listening on that address)?"
            )
        }
        let welcome: WelcomeFrame
        do {
            welcome = try await handler.handshake(
                on: channel,
                hello: HelloFrame(
                    clientId: clientId ?? "atrium-client-\(UUID().uuidString.prefix(8).lowercased())",
                    clientName: clientName,
                    token: token
                ),
                timeout: timeout
            )
        } catch {
            try? await channel.close()
            throw error
        }
        let connection = AtriumConnection(channel: channel, welcome: welcome, timeout: timeout)
        handler.attach(connection)
        return connection
    }

    init(channel: any Channel, welcome: WelcomeFrame, timeout: Duration) {
        self.channel = channel
        self.welcome = welcome
        self.defaultTimeout = timeout
        self.state = Mutex(ClientState())
    }

    /// The host's limits, from `welcome`.
    public var limits: ProtocolLimits { welcome.limits }

    /// A fresh number for a channel or a request.
    func makeNumber() -> UInt64 {
        state.withLock { state in
            defer { state.nextNumber += 1 }
            return state.nextNumber
        }
    }

    /// Sends `frame` and waits for the frame that `key` names.
    func call(_ frame: ClientFrame, awaiting key: WaitKey, timeout: Duration?) async throws -> HostFrame {
        let timeout = timeout ?? defaultTimeout
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let failure = state.withLock { state -> (any Error)? in
                    if let ended = state.ended { return ended }
                    state.waiters[key] = Waiter(continuation: continuation, timer: nil)
                    return nil
                }
                if let failure {
                    continuation.resume(throwing: failure)
                    return
                }
                let timer = channel.eventLoop.scheduleTask(in: .init(timeout)) {
                    self.fail(
                        key, AtriumClientError(.timedOut, "no answer from the host within \(timeout) (\(frame.type))"))
                }
                state.withLock { state in
                    if state.waiters[key] != nil { state.waiters[key]!.timer = timer } else { timer.cancel() }
                }
                if Task.isCancelled {
                    fail(key, CancellationError())
                    return
                }
                channel.writeAndFlush(frame).whenFailure { error in
                    self.fail(key, AtriumClientError(.hostWentAway, "could not send \(frame.type): \(error)"))
                }
            }
        } onCancel: {
            fail(key, CancellationError())
        }
    }

    /// Ends the wait for `key` with `error`, if it is still waiting.
    func fail(_ key: WaitKey, _ error: any Error) {
        let waiter = state.withLock { $0.waiters.removeValue(forKey: key) }
        waiter?.timer?.cancel()
        waiter?.continuation.resume(throwing: error)
    }

    /// Hands an answer to whoever waits for it; false when no one does.
    func deliver(_ frame: HostFrame, to key: WaitKey) -> Bool {
        guard let waiter = state.withLock({ $0.waiters.removeValue(forKey: key) }) else { return false }
        waiter.timer?.cancel()
        waiter.continuation.resume(returning: frame)
        return true
    }

    /// Sends a frame that has no answer.
    func send(_ frame: ClientFrame) async throws {
        if let ended = state.withLock({ $0.ended }) { throw ended }
        do {
            try await channel.writeAndFlush(frame)
        } catch {
            throw AtriumClientError(.hostWentAway, "could not send \(frame.type): \(error)")
        }
    }

    // MARK: - Host-level calls

    /// Round-trips a `ping` and returns how long it took.
    public func ping(timeout: Duration? = nil) async throws -> Duration {
        let id = makeNumber()
        let start = ContinuousClock.now
        _ = try await call(.ping(id: id), awaiting: .pong(id), timeout: timeout)
        return ContinuousClock.now - start
    }

    /// The host's packages, their remote-capable services and their schemes.
    public func apps(timeout: Duration? = nil) async throws -> [AppInfo] {
        let id = makeNumber()
        guard case .apps(let apps) = try await call(.apps(id: id), awaiting: .apps(id), timeout: timeout) else {
            throw AtriumClientError(.protocolError, "the host answered apps with something else")
        }
        return apps.apps
    }

    /// Closes the connection; every channel on it ends, and calls in progress fail.
    public func close() async {
        try? await channel.close()
    }

    // MARK: - Events from the handler (on the event loop)

    func received(_ frame: HostFrame) {
        switch frame {
        case .opened(let opened):
            _ = deliver(frame, to: .opened(opened.channel))
        case .response(let response):
            _ = deliver(frame, to: .response(response.channel, response.id))
        case .pong(let id):
            _ = deliver(frame, to: .pong(id))
        case .apps(let apps):
            _ = deliver(frame, to: .apps(apps.id))
        case .launched(let launched):
            _ = deliver(frame, to: .launched(launched.id))
        case .request(let request):
            let events = state.withLock { $0.channels[request.channel] }
            guard let events else {
                answerRefused(request, "channel \(request.channel) is not open on this client")
                return
            }
            do {
                let message = try request.message.decode()
                events.requests.yield(
                    AppServiceRequest(message: message, channel: request.channel, id: request.id, connection: self))
            } catch {
                answerRefused(request, "\(error)")
            }
        case .closed(let closed):
            let events = state.withLock { $0.channels.removeValue(forKey: closed.channel) }
            events?.closed.yield(closed.status)
            events?.closed.finish()
            events?.requests.finish()
        case .error(let error):
            state.withLock { $0.lastError = error }
        case .welcome, .unknown:
            break
        }
    }

    private func answerRefused(_ request: RequestFrame, _ reason: String) {
        channel.writeAndFlush(
            ClientFrame.response(
                ResponseFrame(channel: request.channel, id: request.id, status: .failure, error: reason)),
            promise: nil
        )
    }

    func ended() {
        let (waiters, channels, error) = state.withLock { state in
            let reason =
                state.lastError.map {
                    AtriumClientError(.hostWentAway, "the host closed the connection: \($0.code): \($0.message)")
                }
                ?? AtriumClientError(.hostWentAway, "the host closed the connection")
            state.ended = reason
            defer {
                state.waiters.removeAll()
                state.channels.removeAll()
            }
            return (state.waiters, state.channels, reason)
        }
        for (_, waiter) in waiters {
            waiter.timer?.cancel()
            waiter.continuation.resume(throwing: error)
        }
        for (_, events) in channels {
            events.closed.yield(.unknown)
            events.closed.finish()
            events.requests.finish()
        }
    }
}

/// The pipeline end of a client connection: the handshake first, then every frame goes to the
/// ``AtriumConnection``.
final class ClientFrameHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HostFrame

    private let lock = NSLock()
    private var connection: AtriumConnection?
    private var handshake: CheckedContinuation<WelcomeFrame, any Error>?
    private var early: [HostFrame] = []

    func handshake(on channel: any Channel, hello: HelloFrame, timeout: Duration) async throws -> WelcomeFrame {
        try await withCheckedThrowingContinuation { continuation in
            lock.withLock { handshake = continuation }
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
            return handshake
        }
        waiting?.resume(with: result)
    }

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
        if case .error(let error) = frame, lock.withLock({ handshake != nil }) {
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
        context.close(promise: nil)
    }
}
