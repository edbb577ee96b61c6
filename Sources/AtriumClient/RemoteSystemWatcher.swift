import AtriumDiscovery
public import AtriumTLS
public import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// Finds Atrium hosts on the local network with DNS-SD (`_atrium._tcp`, through avahi-daemon)
/// and reports them as they come, change and go, as Rome's `RemoteSystemWatcher`:
///
/// ```swift
/// let watcher = RemoteSystemWatcher(filters: [.kinds(["desktop", "laptop"])])
/// for await event in watcher.start() {
///     if case .added(let system) = event { print(system.displayName, system.endpoints) }
/// }
/// ```
///
/// A host that goes away and comes back within ``Options/removalDelay`` (a restart, a new
/// name or port) is reported as updated, not removed and added. Each host's endpoints are
/// tried with a TCP connection when they change and every ``Options/probeInterval``: its
/// ``RemoteSystem/status`` says whether it answered.
public final class RemoteSystemWatcher: Sendable {
    private let core: RemoteSystemWatcherCore

    public var filters: [RemoteSystemFilter] { core.filters }
    public var options: Options { core.options }

    public init(filters: [RemoteSystemFilter] = [], options: Options = Options()) {
        core = RemoteSystemWatcherCore(filters: filters, options: options)
    }

    /// Stops watching when the last reference goes: Avahi's callbacks hold only the core, so
    /// this always runs on the user's side, never on Avahi's thread.
    deinit { core.stop() }

    /// The hosts that match the filters now.
    public var remoteSystems: [RemoteSystem] { core.remoteSystems }

    /// Starts watching; the events arrive on the stream until ``stop()`` (or until this watcher
    /// is released: keep it while you read the stream). Call it once.
    public func start() -> AsyncStream<RemoteSystemEvent> { core.start() }

    /// Stops watching and ends the stream.
    public func stop() { core.stop() }

    /// Adds the host at `hostName:port` (Rome's `RemoteSystem.FindByHostNameAsync`): it is
    /// reported like a discovered one, and its reachability tracked the same way, until the
    /// watcher stops. Call it after ``start()``.
    @discardableResult
    public func add(
        hostName: String, port: Int = 7340, tls: ClientTLS? = nil, timeout: Duration = .seconds(5)
    ) async throws -> RemoteSystem {
        try await core.add(hostName: hostName, port: port, tls: tls, timeout: timeout)
    }

    public struct Options: Sendable {
        /// How long a host that disappeared may take to come back as the same host (an update)
        /// before it is reported removed.
        public var removalDelay: Duration
        /// How often every host's reachability is checked again.
        public var probeInterval: Duration
        /// How long a reachability check waits for a TCP connection.
        public var probeTimeout: Duration
        /// The client's state folder, whose `known-hosts.json` says which hosts are paired.
        public var stateFolder: URL

        public init(
            removalDelay: Duration = .seconds(1), probeInterval: Duration = .seconds(15),
            probeTimeout: Duration = .seconds(2), stateFolder: URL = TLSIdentity.defaultStateFolder()
        ) {
            self.removalDelay = removalDelay
            self.probeInterval = probeInterval
            self.probeTimeout = probeTimeout
            self.stateFolder = stateFolder
        }
    }

}

/// The watcher's state and work, which Avahi's callbacks, reachability checks and timers
/// hold on to.
final class RemoteSystemWatcherCore: Sendable {
    typealias Options = RemoteSystemWatcher.Options
    let filters: [RemoteSystemFilter]
    let options: Options
    private struct State {
        var tracker: RemoteSystemTracker
        var continuation: AsyncStream<RemoteSystemEvent>.Continuation?
        var browser: DNSSDBrowser?
        var periodic: Task<Void, Never>?
        var stopped = false
        /// Systems whose reachability is being tried: one check at a time each.
        var probing: Set<String> = []
    }
    private let state: Mutex<State>

    init(filters: [RemoteSystemFilter], options: Options) {
        self.filters = filters
        self.options = options
        let known = (try? KnownHosts(folder: options.stateFolder).all()) ?? [:]
        let pins = known.filter { !$0.key.hasPrefix("refused:") }
        let paired = Set(pins.values)
        let addresses = Set(pins.keys.filter { !$0.hasPrefix("id:") })
        state = Mutex(
            State(
                tracker: RemoteSystemTracker(filters: filters, pairedIdentities: paired, knownEndpoints: addresses)))
    }

    var remoteSystems: [RemoteSystem] { state.withLock { $0.tracker.matching } }

    func start() -> AsyncStream<RemoteSystemEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: RemoteSystemEvent.self)
        let browser = DNSSDBrowser(type: HostRecord.serviceType) { [weak self] event in self?.browsed(event) }
        let interval = options.probeInterval
        let started = state.withLock { state -> Bool in
            guard state.continuation == nil, !state.stopped else { return false }
            state.continuation = continuation
            state.browser = browser
            state.periodic = Task { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: interval)
                    guard let self, !Task.isCancelled else { return }
                    self.apply { ([], $0.probes) }
                }
            }
            return true
        }
        guard started else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in self?.stop() }
        browser.start()
        return stream
    }

    func stop() {
        let (browser, periodic, continuation) = state.withLock { state in
            state.stopped = true
            defer {
                state.browser = nil
                state.periodic = nil
                state.continuation = nil
            }
            return (state.browser, state.periodic, state.continuation)
        }
        periodic?.cancel()
        browser?.stop()
        continuation?.finish()
    }

    func add(hostName: String, port: Int, tls: ClientTLS?, timeout: Duration) async throws -> RemoteSystem {
        let system = try await RemoteSystem.find(hostName: hostName, port: port, tls: tls, timeout: timeout)
        apply { $0.add(system) }
        return system
    }

    /// From Avahi's thread: must not block.
    private func browsed(_ event: DNSSDBrowser.Event) {
        switch event {
        case .resolved(let item, let resolution):
            // A host paired with since the watcher started counts as paired.
            let identity = HostRecord(txt: resolution.txt)?.identity
            let paired = identity.map { KnownHosts(folder: options.stateFolder).isPaired($0) } ?? false
            apply { tracker in
                if paired, let identity { tracker.pairedIdentities.insert(identity) }
                return tracker.resolved(item, resolution)
            }
        case .removed(let item):
            apply { $0.removed(item) }
        case .unavailable(let reason):
            apply { _ in ([.discoveryUnavailable(reason)], []) }
        }
    }

    /// Changes the tracker and reports its events, in order (under the lock: events from
    /// Avahi's thread, reachability checks and timers never overtake each other), then does
    /// what it asks.
    private func apply(
        _ change: (inout RemoteSystemTracker) -> ([RemoteSystemEvent], [RemoteSystemTracker.Action])
    ) {
        let actions = state.withLock { state -> [RemoteSystemTracker.Action] in
            guard !state.stopped, let continuation = state.continuation else { return [] }
            let (events, actions) = change(&state.tracker)
            for event in events { continuation.yield(event) }
            return actions
        }
        for action in actions {
            switch action {
            case .probe(let id, let endpoints):
                // One check at a time per system: a peer that changes its record many times a
                // second costs one connection attempt in flight, not one per change. A result
                // for endpoints that changed meanwhile is dropped (the next check tries the
                // new ones).
                guard state.withLock({ $0.probing.insert(id).inserted }) else { continue }
                let timeout = options.probeTimeout
                Task { [weak self] in
                    let reachable = await Self.answers(endpoints, timeout: timeout)
                    guard let self else { return }
                    self.state.withLock { _ = $0.probing.remove(id) }
                    self.apply { $0.probed(id, endpoints: endpoints, reachable: reachable) }
                }
            case .expireLater(let id, let generation):
                let delay = options.removalDelay
                Task { [weak self] in
                    try? await Task.sleep(for: delay)
                    guard let self else { return }
                    self.apply { ($0.expire(id, generation: generation), []) }
                }
            }
        }
    }

    /// Whether one of `endpoints` accepts a TCP connection within `timeout` (closed at once,
    /// before any byte: the host sees a connection that ends before its hello).
    static func answers(_ endpoints: [AtriumEndpoint], timeout: Duration) async -> Bool {
        for endpoint in endpoints {
            guard case .tcp(let host, let port) = endpoint.address else { continue }
            let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connectTimeout(
                .init(timeout))
            if let channel = try? await bootstrap.connect(host: host, port: port).get() {
                try? await channel.close()
                return true
            }
        }
        return false
    }
}
