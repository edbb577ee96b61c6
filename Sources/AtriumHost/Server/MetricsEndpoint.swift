import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// Serves the host's metrics over HTTP (`--metrics HOST:PORT`): `GET /metrics` in
/// Prometheus's text format, nothing else. It holds little for whoever connects: a handful of
/// connections at once (more are closed at once), requests of a bounded size, and a
/// connection that sends nothing for a while is closed.
enum MetricsEndpoint {
    /// The most scrapers connected at once.
    static let maxConnections = 16
    /// Seconds a connection may sit idle.
    static let idleTimeout = TimeAmount.seconds(30)

    /// Binds and serves until the returned channel is closed.
    static func start(
        host: String, port: Int, group: any EventLoopGroup, logger: Logger,
        scrape: @escaping @Sendable (any EventLoop) -> EventLoopFuture<[UInt8]>
    ) async throws -> any Channel {
        let open = OpenCount()
        return try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 16)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                guard open.increment() <= maxConnections else {
                    open.decrement()
                    return channel.close()
                }
                channel.closeFuture.whenComplete { _ in open.decrement() }
                return channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(IdleStateHandler(allTimeout: idleTimeout))
                    try sync.configureHTTPServerPipeline(withErrorHandling: true)
                    try sync.addHandler(MetricsHandler(scrape: scrape))
                }
            }
            .bind(host: host, port: port).get()
    }
}

/// How many connections are open, from every event loop.
private final class OpenCount: Sendable {
    private let value = Atomic<Int>(0)
    func increment() -> Int { value.wrappingAdd(1, ordering: .relaxed).newValue }
    func decrement() { value.wrappingSubtract(1, ordering: .relaxed) }
}

private final class MetricsHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let scrape: @Sendable (any EventLoop) -> EventLoopFuture<[UInt8]>
    private var head: HTTPRequestHead?
    /// Bytes of body received; a scrape has none, and more than a little is refused.
    private var bodyBytes = 0

    init(scrape: @escaping @Sendable (any EventLoop) -> EventLoopFuture<[UInt8]>) {
        self.scrape = scrape
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let request):
            head = request
            bodyBytes = 0
        case .body(let body):
            bodyBytes += body.readableBytes
            if bodyBytes > 4096 {
                respond(context, status: .payloadTooLarge, text: "a scrape has no body\n", close: true)
            }
        case .end:
            guard let request = head else { return }
            head = nil
            let path = request.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.uri
            if path != "/metrics" {
                respond(context, status: .notFound, text: "the metrics are at /metrics\n", close: !request.isKeepAlive)
            } else if request.method != .GET && request.method != .HEAD {
                respond(
                    context, status: .methodNotAllowed, text: "GET /metrics\n", close: !request.isKeepAlive,
                    headers: [("Allow", "GET, HEAD")])
            } else {
                // Every event loop hands over what it counted; the answer goes out once they have.
                scrape(context.eventLoop).assumeIsolated().whenComplete { result in
                    switch result {
                    case .success(let text):
                        var body = context.channel.allocator.buffer(bytes: text)
                        if request.method == .HEAD { body.clear() }
                        self.respond(
                            context, status: .ok, body: body,
                            contentType: "text/plain; version=0.0.4; charset=utf-8", close: !request.isKeepAlive)
                    case .failure(let error):
                        self.respond(
                            context, status: .serviceUnavailable, text: "the metrics could not be read: \(error)\n",
                            close: true)
                    }
                }
            }
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    private func respond(
        _ context: ChannelHandlerContext, status: HTTPResponseStatus, text: String, close: Bool,
        headers: [(String, String)] = []
    ) {
        respond(
            context, status: status, body: context.channel.allocator.buffer(string: text),
            contentType: "text/plain; charset=utf-8", close: close, headers: headers)
    }

    private func respond(
        _ context: ChannelHandlerContext, status: HTTPResponseStatus, body: ByteBuffer, contentType: String,
        close: Bool, headers extra: [(String, String)] = []
    ) {
        var headers = HTTPHeaders([("Content-Type", contentType), ("Content-Length", "\(body.readableBytes)")])
        headers.add(contentsOf: extra)
        if close { headers.add(name: "Connection", value: "close") }
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        if body.readableBytes > 0 { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
        let written = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if close { written.whenComplete { [channel = context.channel] _ in channel.close(promise: nil) } }
    }
}
