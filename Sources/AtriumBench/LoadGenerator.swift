import AtriumProtocol
public import AtriumValues
public import Histogram
public import NIOCore
import NIOPosix
public import NIOSSL
import Synchronization

/// What to measure: request/response round trips against one app service.
public struct BenchConfiguration: Sendable {
    public enum Target: Sendable {
        case tcp(host: String, port: Int)
        case unix(path: String)
    }

    public var target: Target
    /// How many connections, each with its own channel.
    public var connections: Int
    /// How many requests each connection keeps in flight (1 = one at a time).
    public var pipeline: Int
    /// How long to send requests for, after the connections are open.
    public var duration: Duration
    public var package: String
    public var service: String
    /// The message every request carries.
    public var message: ValueSet
    /// TLS for TCP connections (any host certificate is accepted: this measures, it does not
    /// authenticate); nil for plain TCP.
    public var tls: NIOSSLContext?

    public init(
        target: Target,
        connections: Int = 1,
        pipeline: Int = 1,
        duration: Duration = .seconds(10),
        package: String = "atrium.examples.echo",
        service: String = "atrium.echo",
        message: ValueSet = [
            "Type": "ping", "CreationDate": .date(Timestamp(secondsSince1970: 1_763_700_000.123)),
            "TargetId": "atrium-bench",
        ],
        tls: NIOSSLContext? = nil
    ) {
        self.tls = tls
        self.target = target
        self.connections = connections
        self.pipeline = pipeline
        self.duration = duration
        self.package = package
        self.service = service
        self.message = message
    }
}

/// What a run measured.
public struct BenchResult: Sendable {
    /// Round trips answered with status 0.
    public var completed: Int
    /// Round trips answered with another status.
    public var failed: Int
    /// From the first request to the last answer.
    public var elapsed: Duration
    /// Round-trip times of successful requests, in nanoseconds.
    public var latency: Histogram<UInt64>
    /// Each connection's time from connecting to `welcome` (with TLS, the handshake too), in
    /// nanoseconds.
    public var setup: Histogram<UInt64>

    public var requestsPerSecond: Double {
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return seconds > 0 ? Double(completed) / seconds : 0
    }

    /// The round-trip time at `percentile` (0 to 100), in microseconds.
    public func microseconds(atPercentile percentile: Double) -> Double {
        Double(latency.valueAtPercentile(percentile)) / 1000
    }
}

/// Why a run could not start.
public struct BenchError: Error, Sendable, CustomStringConvertible {
    public var description: String
}

/// A load generator that drives the wire protocol directly from SwiftNIO event loops (no
/// client library in between), so that what it measures is the host, not itself.
public enum LoadGenerator {
    /// Opens the connections and channels, then keeps `pipeline` requests in flight on each
    /// for `duration`. `progress` is called about once a second with the round trips so far.
    public static func run(
        _ configuration: BenchConfiguration,
        group: (any EventLoopGroup)? = nil,
        progress: @escaping @Sendable (Int, Duration) -> Void = { _, _ in }
    ) async throws -> BenchResult {
        let group = group ?? MultiThreadedEventLoopGroup.singleton
        let message = EncodedValueSet(configuration.message)
        let counter = Counter()
        var handlers: [BenchConnectionHandler] = []
        var ready: [EventLoopFuture<Void>] = []
        for index in 0..<configuration.connections {
            let loop = group.next()
            let handler = BenchConnectionHandler(
                configuration: configuration, message: message, index: index, counter: counter, eventLoop: loop
            )
            handlers.append(handler)
            var bootstrap = ClientBootstrap(group: loop)
            if case .tcp = configuration.target {
                // TCP only: on a Unix socket the option's number means SO_DEBUG (root only).
                bootstrap = bootstrap.channelOption(.socketOption(.tcp_nodelay), value: 1)
            }
            bootstrap =
                bootstrap
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try LoadGenerator.addTLS(configuration.tls, to: channel)
                        try channel.pipeline.syncOperations.addHandlers([
                            ByteToMessageHandler(FrameDecoder<HostFrame>(maxFrameBytes: 64 << 20)),
                            MessageToByteHandler(FrameEncoder<ClientFrame>()),
                            handler,
                        ])
                    }
                }
            do {
                switch configuration.target {
                case .tcp(let host, let port): _ = try await bootstrap.connect(host: host, port: port).get()
                case .unix(let path): _ = try await bootstrap.connect(unixDomainSocketPath: path).get()
                }
            } catch {
                throw BenchError(description: "connection \(index + 1) could not connect: \(error)")
            }
            ready.append(handler.ready.futureResult)
        }
        do {
            for future in ready { try await future.get() }
        } catch {
            throw BenchError(description: "\(error)")
        }

        let start = ContinuousClock.now
        for handler in handlers { handler.start() }
        let deadline = start + configuration.duration
        while ContinuousClock.now < deadline {
            try await Task.sleep(for: min(.seconds(1), deadline - ContinuousClock.now))
            progress(counter.value.load(ordering: .relaxed), ContinuousClock.now - start)
        }
        for handler in handlers { handler.stop() }
        var latency = Histogram<UInt64>(highestTrackableValue: 60_000_000_000, numberOfSignificantValueDigits: .three)
        var setup = Histogram<UInt64>(highestTrackableValue: 60_000_000_000, numberOfSignificantValueDigits: .three)
        var completed = 0
        var failed = 0
        for handler in handlers {
            let result = try await handler.finished.futureResult.get()
            latency.add(result.latency)
            if let nanoseconds = result.setupNanoseconds { setup.record(nanoseconds) }
            completed += result.completed
            failed += result.failed
        }
        return BenchResult(
            completed: completed, failed: failed, elapsed: ContinuousClock.now - start, latency: latency, setup: setup)
    }

    /// Puts a TLS client handler first in `channel`'s pipeline, accepting whatever
    /// certificate the host presents.
    static func addTLS(_ context: NIOSSLContext?, to channel: any Channel) throws {
        guard let context else { return }
        try channel.pipeline.syncOperations.addHandler(
            NIOSSLClientHandler(context: context, serverHostname: nil) { _, promise in
                promise.succeed(.certificateVerified)
            })
    }
}

/// One benchmark connection: hello, open, then requests back to back. Event-loop confined.
final class BenchConnectionHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HostFrame
    typealias OutboundOut = ClientFrame

    struct Outcome: Sendable {
        var completed = 0
        var failed = 0
        var latency = Histogram<UInt64>(highestTrackableValue: 60_000_000_000, numberOfSignificantValueDigits: .three)
        var setupNanoseconds: UInt64?
    }

    let configuration: BenchConfiguration
    let message: EncodedValueSet
    let index: Int
    let counter: Counter
    let eventLoop: any EventLoop
    let ready: EventLoopPromise<Void>
    let finished: EventLoopPromise<Outcome>

    private var context: ChannelHandlerContext?
    private var outcome = Outcome()
    private var sentAt: [UInt64: UInt64] = [:]
    private var nextId: UInt64 = 1
    private var running = false
    private var done = false

    init(
        configuration: BenchConfiguration, message: EncodedValueSet, index: Int, counter: Counter,
        eventLoop: any EventLoop
    ) {
        self.configuration = configuration
        self.message = message
        self.index = index
        self.counter = counter
        self.eventLoop = eventLoop
        ready = eventLoop.makePromise()
        finished = eventLoop.makePromise()
    }

    /// When the connection was asked for, to time its setup.
    private let created = NIODeadline.now()

    func channelActive(context: ChannelHandlerContext) {
        self.context = context
        context.writeAndFlush(wrapOutboundOut(.hello(HelloFrame(clientId: "atrium-bench-\(index)"))), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .welcome:
            outcome.setupNanoseconds = UInt64(max(0, (NIODeadline.now() - created).nanoseconds))
            context.writeAndFlush(
                wrapOutboundOut(
                    .open(OpenFrame(channel: 1, service: configuration.service, package: configuration.package))),
                promise: nil
            )
        case .opened(let opened):
            if opened.status == .success {
                ready.succeed()
            } else {
                ready.fail(
                    BenchError(
                        description:
                            "opening \(configuration.package)/\(configuration.service) answered \(opened.status)"))
            }
        case .response(let response):
            guard let sent = sentAt.removeValue(forKey: response.id) else { return }
            if response.status == .success {
                outcome.completed += 1
                outcome.latency.record(NIODeadline.now().uptimeNanoseconds - sent)
                counter.value.wrappingAdd(1, ordering: .relaxed)
            } else {
                outcome.failed += 1
            }
            if running {
                send(context: context)
                context.flush()
            } else if sentAt.isEmpty {
                finish()
            }
        case .error(let error):
            ready.fail(BenchError(description: "the host sent an error: \(error.code): \(error.message)"))
        default:
            break
        }
    }

    private func send(context: ChannelHandlerContext) {
        let id = nextId
        nextId += 1
        sentAt[id] = NIODeadline.now().uptimeNanoseconds
        context.write(wrapOutboundOut(.request(RequestFrame(channel: 1, id: id, message: message))), promise: nil)
    }

    func start() {
        eventLoop.execute {
            guard let context = self.context else { return }
            self.running = true
            for _ in 0..<self.configuration.pipeline { self.send(context: context) }
            context.flush()
        }
    }

    func stop() {
        eventLoop.execute {
            self.running = false
            if self.sentAt.isEmpty { self.finish() }
            // Answers still on their way get five seconds; then what is missing counts as failed.
            self.eventLoop.scheduleTask(in: .seconds(5)) {
                self.outcome.failed += self.sentAt.count
                self.sentAt.removeAll()
                self.finish()
            }
        }
    }

    private func finish() {
        guard !done else { return }
        done = true
        finished.succeed(outcome)
        context?.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        ready.fail(BenchError(description: "connection \(index + 1) was closed by the host"))
        outcome.failed += sentAt.count
        sentAt.removeAll()
        finish()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// Round trips so far, across connections, for the progress line.
final class Counter: Sendable {
    let value = Atomic<Int>(0)
}

extension LoadGenerator {
    /// Opens `connections` connections, says hello on each, and holds them open, doing
    /// nothing, until `body` returns: for measuring what an idle connection costs the host.
    public static func holdIdle<T>(
        _ target: BenchConfiguration.Target,
        connections: Int,
        tls: NIOSSLContext? = nil,
        group: (any EventLoopGroup)? = nil,
        while body: () async throws -> T
    ) async throws -> T {
        let group = group ?? MultiThreadedEventLoopGroup.singleton
        var channels: [any Channel] = []
        defer {
            for channel in channels { channel.close(promise: nil) }
        }
        for index in 0..<connections {
            let bootstrap = ClientBootstrap(group: group)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try LoadGenerator.addTLS(tls, to: channel)
                        try channel.pipeline.syncOperations.addHandler(
                            MessageToByteHandler(FrameEncoder<ClientFrame>()))
                    }
                }
            let channel: any Channel
            do {
                switch target {
                case .tcp(let host, let port): channel = try await bootstrap.connect(host: host, port: port).get()
                case .unix(let path): channel = try await bootstrap.connect(unixDomainSocketPath: path).get()
                }
            } catch {
                throw BenchError(description: "idle connection \(index + 1) could not connect: \(error)")
            }
            try await channel.writeAndFlush(ClientFrame.hello(HelloFrame(clientId: "idle-\(index)")))
            channels.append(channel)
        }
        return try await body()
    }
}
