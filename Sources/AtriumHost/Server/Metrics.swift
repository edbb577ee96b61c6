package import AtriumProtocol
package import AtriumValues
import CoreMetrics
package import NIOCore
import Prometheus
import Synchronization

/// The host's metrics (`--metrics`), kept with swift-metrics in a Prometheus registry of the
/// host's own and served by ``MetricsEndpoint``.
///
/// The request path records into its event loop's ``LoopMetrics``: plain numbers that only
/// that loop touches, so an answer costs a clock read and a few additions, with no atomic, no
/// lock and no line of memory shared with another core. A scrape asks each loop to hand what
/// it counted over (``scrape(on:update:)``): request counts and bytes go into the registry's
/// counters, the latency histograms (summed over the loops) are written beside the registry's
/// output. What the host counts itself (connections, channels, requests pending, packages) is
/// read at the scrape, at no cost in between; what is rare (launches, refusals, restarts) is
/// recorded where it happens.
///
/// Labels carry only what the host's operator chose (packages, their declared services and
/// schemes) or the host's own words (statuses, refusal kinds), never a client's text: a
/// service or scheme no manifest declares is counted as `other`.
package final class HostMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory
    let bytesIn: CoreMetrics.Counter
    let bytesOut: CoreMetrics.Counter
    private let services = Mutex<[ServiceKey: ServiceMetrics]>([:])
    private let counters = Mutex<[CounterKey: CoreMetrics.Counter]>([:])
    /// What was last added to the counters the host keeps totals of itself.
    private let reported = Mutex<[String: UInt64]>([:])
    /// The packages that have gauges of their own.
    private let gauged = Mutex<Set<String>>([])
    /// Each event loop's own recordings, made at its first connection.
    private let loops = Mutex<[ObjectIdentifier: NIOLoopBound<LoopMetrics>]>([:])
    /// The request latency histograms: what the loops handed over at earlier scrapes. Touched
    /// by one scrape at a time.
    private let latencies = Mutex<[ObjectIdentifier: (ServiceMetrics, LatencyHistogram)]>([:])

    package init() {
        factory = PrometheusMetricsFactory(registry: registry)
        bytesIn = CoreMetrics.Counter(label: "atrium_received_bytes_total", factory: factory)
        bytesOut = CoreMetrics.Counter(label: "atrium_sent_bytes_total", factory: factory)
    }

    /// The recordings of `loop`, to be used on it only.
    package func loopMetrics(on loop: any EventLoop) -> LoopMetrics {
        let key = ObjectIdentifier(loop)
        return loops.withLock { loops in
            if let existing = loops[key] { return existing.value }
            let made = LoopMetrics()
            loops[key] = NIOLoopBound(made, eventLoop: loop)
            return made
        }
    }

    private struct ServiceKey: Hashable {
        var package: String
        var service: String
    }

    private struct CounterKey: Hashable {
        var label: String
        var dimensions: [String]
    }

    /// The metrics of requests to `service` of `package`, made at the first open of it.
    package func service(package: String, service: String) -> ServiceMetrics {
        let key = ServiceKey(package: package, service: service)
        return services.withLock { services in
            if let existing = services[key] { return existing }
            let made = ServiceMetrics(package: package, service: service, factory: factory)
            services[key] = made
            return made
        }
    }

    /// A counter by label and dimensions, made once.
    func counter(_ label: String, _ dimensions: [(String, String)]) -> CoreMetrics.Counter {
        let key = CounterKey(label: label, dimensions: dimensions.flatMap { [$0.0, $0.1] })
        return counters.withLock { counters in
            if let existing = counters[key] { return existing }
            let made = CoreMetrics.Counter(label: label, dimensions: dimensions, factory: factory)
            counters[key] = made
            return made
        }
    }

    /// A launch answered: by scheme (one a manifest declares, else `other`) and status.
    func launched(scheme: String?, status: RemoteLaunchUriStatus) {
        counter("atrium_launches_total", [("scheme", scheme ?? "other"), ("status", Self.name(status))]).increment()
    }

    /// A status's name without its number ("Success", not "Success (0)").
    static func name(_ status: some StatusCode & CustomStringConvertible) -> String {
        String(status.description.prefix { $0 != " " })
    }

    /// The most kinds of refusal counted apart; the rest share one.
    static let maxRefusalKinds = 256
    private let refusalKinds = Mutex<Set<String>>([])

    /// A refusal the host logged (``BreachLog``), by its kind.
    func refused(_ kind: String) {
        let kind = refusalKinds.withLock { kinds in
            guard kinds.contains(kind) || kinds.count < Self.maxRefusalKinds else { return "(other kinds)" }
            kinds.insert(kind)
            return kind
        }
        counter("atrium_refusals_total", [("reason", kind)]).increment()
    }

    /// A package's worker process restarted.
    func restarted(package: String) {
        counter("atrium_plugin_restarts_total", [("package", package)]).increment()
    }

    /// A gauge set to `value` (made at its first use).
    func gauge(_ label: String, _ dimensions: [(String, String)] = [], _ value: Double) {
        CoreMetrics.Gauge(label: label, dimensions: dimensions, factory: factory).record(value)
    }

    /// Takes away the gauges of packages no longer served (a reload removed them): Prometheus
    /// then sees their series end.
    func forget(packagesOtherThan current: Set<String>) {
        let gone = gauged.withLock { gauged -> Set<String> in
            let gone = gauged.subtracting(current)
            gauged = current
            return gone
        }
        for package in gone {
            CoreMetrics.Gauge(label: "atrium_channels", dimensions: [("package", package)], factory: factory).destroy()
            for state in BackendHealth.State.allCases {
                CoreMetrics.Gauge(
                    label: "atrium_package_state", dimensions: [("package", package), ("state", state.rawValue)],
                    factory: factory
                ).destroy()
            }
        }
    }

    /// Brings a counter of a total the host keeps itself up to `total`.
    func total(_ label: String, _ total: UInt64) {
        let added = reported.withLock { reported -> UInt64 in
            let before = reported[label] ?? 0
            reported[label] = max(before, total)
            return total > before ? total - before : 0
        }
        if added > 0 { counter(label, []).increment(by: Int64(truncatingIfNeeded: added)) }
    }

    /// How long a scrape waits for a loop to hand over its numbers: a loop that a plugin
    /// blocks does not stop the scrape (its numbers are added when it hands them over, and
    /// reach the next one).
    static let handOverWait = TimeAmount.seconds(2)

    /// The metrics in Prometheus's text format, once every loop handed over what it counted
    /// (or ``handOverWait`` passed) and `update` set what is read at the scrape. Completes on
    /// `eventLoop`.
    func scrape(on eventLoop: any EventLoop, update: @escaping @Sendable () -> Void) -> EventLoopFuture<[UInt8]> {
        let shards = loops.withLock { Array($0.values) }
        let handedOver = shards.map { shard in
            shard.eventLoop.submit { shard.value.handOver() }.map { [self] recording in add(recording) }
        }
        let promise = eventLoop.makePromise(of: Void.self)
        let done = NIOLoopBoundBox(false, eventLoop: eventLoop)
        let finish: @Sendable () -> Void = {
            guard !done.value else { return }
            done.value = true
            promise.succeed(())
        }
        let timer = eventLoop.scheduleTask(in: Self.handOverWait, finish)
        EventLoopFuture.andAllComplete(handedOver, on: eventLoop).whenComplete { _ in
            timer.cancel()
            finish()
        }
        return promise.futureResult.map { [self] in
            update()
            return latencies.withLock { latencies in
                var text = registry.emitToBuffer()
                LatencyHistogram.emit(
                    latencies.values.sorted { ($0.0.package, $0.0.service) < ($1.0.package, $1.0.service) },
                    into: &text)
                return text
            }
        }
    }

    /// Adds what a loop handed over to the counters and histograms.
    private func add(_ recording: LoopMetrics.Recording) {
        if recording.bytesIn > 0 { bytesIn.increment(by: Int64(recording.bytesIn)) }
        if recording.bytesOut > 0 { bytesOut.increment(by: Int64(recording.bytesOut)) }
        latencies.withLock { latencies in
            for entry in recording.services {
                for (status, count) in entry.statuses.enumerated() where count > 0 {
                    entry.service.byStatus[status].increment(by: Int64(count))
                }
                guard entry.latency.count > 0 else { continue }
                let key = ObjectIdentifier(entry.service)
                var histogram = latencies[key]?.1 ?? LatencyHistogram()
                histogram.add(entry.latency)
                latencies[key] = (entry.service, histogram)
            }
        }
    }
}

/// What one event loop recorded since the last scrape: used on that loop only.
package final class LoopMetrics {
    package struct Service {
        let service: ServiceMetrics
        package var statuses = [Int](repeating: 0, count: ServiceMetrics.statusCount)
        var latency = LatencyHistogram()
    }

    var services: [Service] = []
    private var indices: [ObjectIdentifier: Int] = [:]
    package internal(set) var bytesIn = 0
    package internal(set) var bytesOut = 0

    /// Where `service` is recorded on this loop (an index for ``answered(_:status:since:)``).
    package func index(of service: ServiceMetrics) -> Int {
        let key = ObjectIdentifier(service)
        if let index = indices[key] { return index }
        services.append(Service(service: service))
        indices[key] = services.count - 1
        return services.count - 1
    }

    /// An answer to a request to the service at `index`, which came in at `start`.
    package func answered(_ index: Int, status: AppServiceResponseStatus, since start: NIODeadline) {
        let status =
            (0..<ServiceMetrics.statusCount).contains(status.rawValue)
            ? status.rawValue : AppServiceResponseStatus.unknown.rawValue
        services[index].statuses[status] += 1
        services[index].latency.record((NIODeadline.now() - start).nanoseconds)
    }

    /// What was recorded since the last hand-over; starts again from nothing.
    package func handOver() -> Recording {
        let recording = Recording(services: services, bytesIn: bytesIn, bytesOut: bytesOut)
        for index in services.indices {
            services[index].statuses = [Int](repeating: 0, count: ServiceMetrics.statusCount)
            services[index].latency = LatencyHistogram()
        }
        (bytesIn, bytesOut) = (0, 0)
        return recording
    }

    package struct Recording: Sendable {
        package var services: [Service]
        package var bytesIn: Int
        package var bytesOut: Int
    }
}

extension LoopMetrics.Service: Sendable {}

/// A request latency histogram in Prometheus's form (cumulative buckets, a sum and a count),
/// kept as plain numbers: buckets from 50 µs (a loopback round trip is tens of microseconds)
/// to 30 s (past the default response timeout).
struct LatencyHistogram: Sendable {
    static let bounds: [Int64] = [
        50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 25_000_000, 50_000_000,
        100_000_000, 250_000_000, 500_000_000, 1_000_000_000, 2_500_000_000, 5_000_000_000, 10_000_000_000,
        30_000_000_000,
    ]
    /// Observations at most each bound (not yet cumulative), and above the last.
    var buckets = [Int](repeating: 0, count: bounds.count + 1)
    var sumNanoseconds: Int64 = 0
    var count = 0

    mutating func record(_ nanoseconds: Int64) {
        var index = 0
        while index < Self.bounds.count, nanoseconds > Self.bounds[index] { index += 1 }
        buckets[index] += 1
        sumNanoseconds &+= nanoseconds
        count += 1
    }

    mutating func add(_ other: LatencyHistogram) {
        for index in buckets.indices { buckets[index] += other.buckets[index] }
        sumNanoseconds &+= other.sumNanoseconds
        count += other.count
    }

    static let name = "atrium_request_duration_seconds"

    /// The histograms in Prometheus's text format.
    static func emit(_ histograms: [(ServiceMetrics, LatencyHistogram)], into text: inout [UInt8]) {
        guard !histograms.isEmpty else { return }
        text.append(contentsOf: "# TYPE \(name) histogram\n".utf8)
        for (service, histogram) in histograms {
            let labels = "package=\"\(escaped(service.package))\",service=\"\(escaped(service.service))\""
            var cumulative = 0
            for (index, bound) in bounds.enumerated() {
                cumulative += histogram.buckets[index]
                text.append(contentsOf: "\(name)_bucket{\(labels),le=\"\(seconds(bound))\"} \(cumulative)\n".utf8)
            }
            text.append(contentsOf: "\(name)_bucket{\(labels),le=\"+Inf\"} \(histogram.count)\n".utf8)
            text.append(contentsOf: "\(name)_sum{\(labels)} \(seconds(histogram.sumNanoseconds))\n".utf8)
            text.append(contentsOf: "\(name)_count{\(labels)} \(histogram.count)\n".utf8)
        }
    }

    static func seconds(_ nanoseconds: Int64) -> String {
        String(Double(nanoseconds) / 1e9)
    }

    /// A label value as the text format writes it: backslash, quote and line feed escaped.
    static func escaped(_ value: String) -> String {
        var result = ""
        for character in value {
            switch character {
            case "\\": result += "\\\\"
            case "\"": result += "\\\""
            case "\n": result += "\\n"
            default: result.append(character)
            }
        }
        return result
    }
}

/// The request counters of one service of one package; the loops count into them at each
/// scrape.
package final class ServiceMetrics: Sendable {
    /// The response statuses counted apart (others count as Unknown).
    static let statusCount = 11
    let package: String
    let service: String
    /// A counter for each response status, by its number.
    let byStatus: [CoreMetrics.Counter]

    init(package: String, service: String, factory: PrometheusMetricsFactory) {
        self.package = package
        self.service = service
        let labels = [("package", package), ("service", service)]
        byStatus = (0..<Self.statusCount).map { raw in
            CoreMetrics.Counter(
                label: "atrium_requests_total",
                dimensions: labels + [("status", HostMetrics.name(AppServiceResponseStatus(rawValue: raw)))],
                factory: factory)
        }
    }
}

/// Counts the bytes a connection receives (before TLS: what the network carries), into its
/// event loop's ``LoopMetrics``: once per read.
package final class ByteCountingHandler: ChannelInboundHandler, RemovableChannelHandler {
    package typealias InboundIn = ByteBuffer
    package typealias InboundOut = ByteBuffer

    private let loop: LoopMetrics

    package init(loop: LoopMetrics) {
        self.loop = loop
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        loop.bytesIn += unwrapInboundIn(data).readableBytes
        context.fireChannelRead(data)
    }
}

extension ByteBuffer {
    /// Appends `frame` with its length prefix, and counts its bytes into `loop` (the
    /// connection's event loop's ``LoopMetrics``; the frames' bytes: TLS adds its own around
    /// them), when there is one.
    package mutating func writeFrame(_ frame: HostFrame, countedIn loop: LoopMetrics?) {
        let before = writerIndex
        writeFrame(frame)
        loop?.bytesOut += writerIndex - before
    }
}
