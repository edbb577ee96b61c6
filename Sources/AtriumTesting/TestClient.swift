public import AtriumProtocol
public import AtriumValues
import Foundation
public import NIOCore
import NIOPosix
import Synchronization

/// A scripted client for end-to-end tests: it writes frames (or raw bytes, to send broken
/// ones) and reads the host's frames one at a time, in order.
public final class TestClient: Sendable {
    public let channel: any Channel
    let inbox: Inbox

    public struct Timeout: Error, CustomStringConvertible {
        public var description: String
    }

    /// Connects over TCP to `127.0.0.1:port`, from `localAddress` when given (another
    /// loopback address, 127.0.0.2, is another peer to the host). With `autoRead` off the
    /// client reads nothing until told (``readMore()``): a client that does not read.
    ///
    /// `prepare` adds handlers before the client's own (TLS, say): it runs on the channel's
    /// event loop.
    public static func connect(
        port: Int, from localAddress: String? = nil, autoRead: Bool = true,
        prepare: (@Sendable (any Channel) throws -> Void)? = nil
    ) async throws -> TestClient {
        let inbox = Inbox()
        var bootstrap = bootstrap(inbox, prepare: prepare).channelOption(.autoRead, value: autoRead)
        if let localAddress {
            bootstrap = bootstrap.bind(to: try SocketAddress(ipAddress: localAddress, port: 0))
        }
        let channel = try await bootstrap.connect(host: "127.0.0.1", port: port).get()
        return TestClient(channel: channel, inbox: inbox)
    }

    /// A frame whose body is `body` as it is (to send broken frames with ``sendRaw(_:)``).
    public static func frame(_ body: [UInt8]) -> [UInt8] {
        withUnsafeBytes(of: UInt32(body.count).bigEndian) { Array($0) } + body
    }

    /// Asks for one more read (for a client connected with `autoRead` off).
    public func readMore() {
        channel.read()
    }

    /// Writes `bytes` without waiting for them to go out; returns whether the connection can
    /// take more now (false once the host stops reading and the buffers fill).
    public func push(_ bytes: [UInt8]) async throws -> Bool {
        let channel = self.channel
        return try await channel.eventLoop.submit {
            channel.writeAndFlush(channel.allocator.buffer(bytes: bytes), promise: nil)
            return channel.isWritable
        }.get()
    }

    /// Shuts down the client's sending side (a TCP half-close); it can still read.
    public func closeOutput() async throws {
        try await channel.close(mode: .output)
    }

    /// Connects to the host's local Unix socket.
    public static func connect(unixSocket path: String) async throws -> TestClient {
        let inbox = Inbox()
        let channel = try await bootstrap(inbox).connect(unixDomainSocketPath: path).get()
        return TestClient(channel: channel, inbox: inbox)
    }

    static func bootstrap(_ inbox: Inbox, prepare: (@Sendable (any Channel) throws -> Void)? = nil) -> ClientBootstrap {
        ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try prepare?(channel)
                    try channel.pipeline.syncOperations.addHandlers([
                        ByteToMessageHandler(FrameDecoder<HostFrame>(maxFrameBytes: 64 << 20)),
                        InboxHandler(inbox: inbox),
                    ])
                }
            }
    }

    init(channel: any Channel, inbox: Inbox) {
        self.channel = channel
        self.inbox = inbox
    }

    /// Sends one frame.
    public func send(_ frame: ClientFrame) async throws {
        var buffer = channel.allocator.buffer(capacity: 64)
        buffer.writeFrame(frame)
        try await channel.writeAndFlush(buffer)
    }

    /// Sends bytes as they are, to break the protocol on purpose.
    public func sendRaw(_ bytes: [UInt8]) async throws {
        try await channel.writeAndFlush(channel.allocator.buffer(bytes: bytes))
    }

    /// The next frame from the host, or nil when the connection closed.
    ///
    /// - Throws: ``Timeout`` when nothing arrives within `timeout`.
    public func next(timeout: Duration = .seconds(10)) async throws -> HostFrame? {
        try await inbox.next(timeout: timeout)
    }

    /// Whether the host closed the connection (waiting up to `timeout` for it).
    public func isClosedByHost(timeout: Duration = .seconds(10)) async throws -> Bool {
        while let frame = try await next(timeout: timeout) {
            _ = frame
        }
        return true
    }

    /// `hello`, then the `welcome`.
    @discardableResult
    public func hello(clientId: String = "test-client", timeout: Duration = .seconds(10)) async throws -> WelcomeFrame {
        try await send(.hello(HelloFrame(clientId: clientId)))
        let frame = try await next(timeout: timeout)
        guard case .welcome(let welcome) = frame else {
            throw Timeout(description: "expected welcome, got \(String(describing: frame))")
        }
        return welcome
    }

    /// `open`, then the `opened` status.
    public func open(channel: UInt64, service: String, package: String) async throws -> AppServiceConnectionStatus {
        try await opened(channel: channel, service: service, package: package).status
    }

    /// `open`, then the whole `opened` frame (its status and reason).
    public func opened(channel: UInt64, service: String, package: String) async throws -> OpenedFrame {
        try await send(.open(OpenFrame(channel: channel, service: service, package: package)))
        let frame = try await next()
        guard case .opened(let opened) = frame, opened.channel == channel else {
            throw Timeout(description: "expected opened for channel \(channel), got \(String(describing: frame))")
        }
        return opened
    }

    /// `request`, then its `response` (other frames before it are an error).
    public func request(channel: UInt64, id: UInt64, _ message: ValueSet) async throws -> ResponseFrame {
        try await send(.request(RequestFrame(channel: channel, id: id, message: EncodedValueSet(message))))
        return try await response()
    }

    /// The next frame, which must be a response.
    public func response(timeout: Duration = .seconds(10)) async throws -> ResponseFrame {
        let frame = try await next(timeout: timeout)
        guard case .response(let response) = frame else {
            throw Timeout(description: "expected a response, got \(String(describing: frame))")
        }
        return response
    }

    public func close() async {
        try? await channel.close()
    }
}

/// Frames received, waiting to be read in order.
final class Inbox: Sendable {
    struct State {
        var frames: [HostFrame] = []
        var waiter: CheckedContinuation<HostFrame?, any Error>?
        /// Which call of `next` the waiter belongs to, so that a stale timeout leaves it alone.
        var waiterToken = 0
        var finished = false
    }

    let state = Mutex(State())

    func push(_ frame: HostFrame) {
        let waiter = state.withLock { state -> CheckedContinuation<HostFrame?, any Error>? in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.frames.append(frame)
            return nil
        }
        waiter?.resume(returning: frame)
    }

    func finish() {
        let waiter = state.withLock { state -> CheckedContinuation<HostFrame?, any Error>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    func next(timeout: Duration) async throws -> HostFrame? {
        try await withCheckedThrowingContinuation { continuation in
            var token = 0
            let ready = state.withLock { state -> Result<HostFrame?, any Error>? in
                if !state.frames.isEmpty { return .success(state.frames.removeFirst()) }
                if state.finished { return .success(nil) }
                state.waiter = continuation
                state.waiterToken += 1
                token = state.waiterToken
                return nil
            }
            if let ready {
                continuation.resume(with: ready)
                return
            }
            let waiting = token
            Task {
                try? await Task.sleep(for: timeout)
                let waiter = self.state.withLock { state -> CheckedContinuation<HostFrame?, any Error>? in
                    guard state.waiterToken == waiting else { return nil }
                    defer { state.waiter = nil }
                    return state.waiter
                }
                waiter?.resume(throwing: TestClient.Timeout(description: "no frame from the host within \(timeout)"))
            }
        }
    }
}

final class InboxHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = HostFrame
    let inbox: Inbox

    init(inbox: Inbox) { self.inbox = inbox }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        inbox.push(unwrapInboundIn(data))
    }

    func channelInactive(context: ChannelHandlerContext) {
        inbox.finish()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
