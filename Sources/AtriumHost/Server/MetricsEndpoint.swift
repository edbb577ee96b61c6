import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// Serves the host's metrics over HTTP (`--metrics HOST:PORT`): `GET /metrics` in
/// Prometheus's text format, nothing else. It holds little for whoever connects: a handful of
/// connections at once, a few from any one address (more are closed at once); a request's
/// head must arrive within ``headTimeout`` of the connection or of the answer before it, and
/// the whole request within ``requestTimeout`` (an idle or trickling connection is closed);
/// when all the places are taken, a new connection takes the place of the oldest one still
/// waiting for its request head, so that stalled connections cannot keep a scrape out; a
/// connection that does not read its answers is closed, and a scrape within ``reuse`` of the
/// last one gets the same text, so asking again and again costs the host nothing more.
enum MetricsEndpoint {
    /// The most scrapers connected at once.
    static let maxConnections = 16
    /// The most connected at once from one address (an IPv6 address's /64).
    static let maxConnectionsPerAddress = 4
    /// How long a request's head may take to arrive (a scraper sends it at once).
    static let headTimeout = TimeAmount.seconds(5)
    /// How long a request may take to arrive, whole.
    static let requestTimeout = TimeAmount.seconds(30)
    /// How long a scrape's text is given again.
    static let reuse = TimeAmount.seconds(1)

    /// Binds and serves until the returned channel is closed.
    static func start(
        host: String, port: Int, group: any EventLoopGroup, logger: Logger,
        scrape: @escaping @Sendable (any EventLoop) -> EventLoopFuture<[UInt8]>
    ) async throws -> any Channel {
        let connections = MetricsConnections()
        let cached = CachedScrape(scrape: scrape)
        return try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 16)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            // A scraper that does not read stops being answered long before it holds much.
            .childChannelOption(.writeBufferWaterMark, value: .init(low: 64 << 10, high: 256 << 10))
            .childChannelInitializer { channel in
                guard let id = connections.admit(channel) else { return channel.close() }
                channel.closeFuture.whenComplete { _ in connections.remove(id) }
                return channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.configureHTTPServerPipeline(withErrorHandling: true)
                    try sync.addHandler(MetricsHandler(id: id, connections: connections, scrape: cached.text(on:)))
                }
            }
            .bind(host: host, port: port).get()
    }
}

/// The connections to the metrics endpoint, from every event loop: how many there are, from
/// which address, and which wait for a request's head (and since when).
final class MetricsConnections: Sendable {
    private struct Entry {
        let address: String
        let channel: any Channel
        /// Since when it waits for a request's head, if it does.
        var waitingSince: NIODeadline?
    }
    private struct State {
        var next: UInt64 = 0
        var entries: [UInt64: Entry] = [:]
    }
    private let state = Mutex(State())

    /// Admits `channel` and returns its number, or nil when its address has its share
    /// already, or when every place is taken by connections that sent a request's head. A
    /// connection still waiting for one gives its place up to the new one (the oldest such).
    func admit(_ channel: any Channel) -> UInt64? {
        let address = channel.remoteAddress.flatMap(ConnectionHandler.peerKey) ?? "?"
        let (id, evicted) = state.withLock { state -> (UInt64?, (any Channel)?) in
            let fromAddress = state.entries.values.filter { $0.address == address }.count
            guard fromAddress < MetricsEndpoint.maxConnectionsPerAddress else { return (nil, nil) }
            var evicted: (any Channel)?
            if state.entries.count >= MetricsEndpoint.maxConnections {
                let stalled = state.entries.compactMap { id, entry in entry.waitingSince.map { (id, $0) } }
                guard let oldest = stalled.min(by: { $0.1 < $1.1 }) else { return (nil, nil) }
                evicted = state.entries.removeValue(forKey: oldest.0)?.channel
            }
            state.next += 1
            state.entries[state.next] = Entry(address: address, channel: channel, waitingSince: .now())
            return (state.next, evicted)
        }
        evicted?.close(promise: nil)
        return id
    }

    /// Connection `id` waits for a request's head (from now), or no longer does.
    func waiting(_ id: UInt64, _ isWaiting: Bool) {
        state.withLock { $0.entries[id]?.waitingSince = isWaiting ? .now() : nil }
    }

    func remove(_ id: UInt64) {
        _ = state.withLock { $0.entries.removeValue(forKey: id) }
    }
}

/// The last scrape's text, given again within ``MetricsEndpoint/reuse``.
private final class CachedScrape: Sendable {
    private let scrape: @Sendable (any EventLoop) -> EventLoopFuture<[UInt8]>
    private let last = Mutex<(at: NIODeadline, text: [UInt8])?>(nil)

    init(scrape: @escaping @Sendable (any EventLoop) -> EventLoopFuture<[UInt8]>) {
        self.scrape = scrape
    }

    func text(on eventLoop: any EventLoop) -> EventLoopFuture<[UInt8]> {
        let now = NIODeadline.now()
        if let recent = last.withLock({ $0 }), now - recent.at < MetricsEndpoint.reuse {
            return eventLoop.makeSucceededFuture(recent.text)
        }
        return scrape(eventLoop).map { [self] text in
            last.withLock { $0 = (now, text) }
            return text
        }
    }
}

private final class MetricsHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let scrape: @Sendable (any EventLoop) -> EventLoopFuture<[UInt8]>
    /// Its number among the endpoint's connections, which are told when it waits for a head.
    private let id: UInt64
    private let connections: MetricsConnections
    private var head: HTTPRequestHead?
    /// Bytes of body received; a scrape has none, and more than a little is refused.
    private var bodyBytes = 0
    /// After a refused body: the rest of that request is not answered again.
    private var refused = false
    /// Closes the connection unless a whole request arrives in time.
    private var deadline: Scheduled<Void>?

    init(
        id: UInt64, connections: MetricsConnections,
        scrape: @escaping @Sendable (any EventLoop) -> EventLoopFuture<[UInt8]>
    ) {
        self.id = id
        self.connections = connections
        self.scrape = scrape
    }

    func handlerAdded(context: ChannelHandlerContext) {
        armDeadline(context, MetricsEndpoint.headTimeout)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
    }

    /// Closes the connection unless what it waits for comes within `timeout`.
    private func armDeadline(_ context: ChannelHandlerContext, _ timeout: TimeAmount) {
        deadline?.cancel()
        let channel = context.channel
        deadline = context.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let request):
            // The rest of the request, within the request's deadline (counted from its head).
            connections.waiting(id, false)
            armDeadline(context, MetricsEndpoint.requestTimeout)
            head = request
            bodyBytes = 0
            refused = false
        case .body(let body):
            bodyBytes += body.readableBytes
            if bodyBytes > 4096, !refused {
                refused = true
                head = nil
                respond(context, status: .payloadTooLarge, text: "a scrape has no body\n", close: true)
            }
        case .end:
            guard let request = head, !refused else { return }
            head = nil
            deadline?.cancel()
            // One that does not read what it was sent is not sent more.
            guard context.channel.isWritable else {
                context.close(promise: nil)
                return
            }
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
                        self.respond(
                            context, status: .ok, body: context.channel.allocator.buffer(bytes: text),
                            contentType: "text/plain; version=0.0.4; charset=utf-8", close: !request.isKeepAlive,
                            withoutBody: request.method == .HEAD)
                    case .failure(let error):
                        self.respond(
                            context, status: .serviceUnavailable, text: "the metrics could not be read: \(error)\n",
                            close: true)
                    }
                }
            }
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

    /// Writes a response; with `withoutBody` (HEAD), its headers only, the length the body's.
    private func respond(
        _ context: ChannelHandlerContext, status: HTTPResponseStatus, body: ByteBuffer, contentType: String,
        close: Bool, headers extra: [(String, String)] = [], withoutBody: Bool = false
    ) {
        var headers = HTTPHeaders([("Content-Type", contentType), ("Content-Length", "\(body.readableBytes)")])
        headers.add(contentsOf: extra)
        if close { headers.add(name: "Connection", value: "close") }
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        if !withoutBody, body.readableBytes > 0 {
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        }
        let written = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if close {
            written.whenComplete { [channel = context.channel] _ in channel.close(promise: nil) }
        } else {
            connections.waiting(id, true)
            armDeadline(context, MetricsEndpoint.headTimeout)
        }
    }
}
