import AtriumProtocol
import AtriumTransfers
import AtriumValues
import CAtriumSystem
import Dispatch
import Foundation
public import Logging
public import NIOCore
import NIOPosix
import Synchronization

/// The heart of the host: the packages and their backends, the connections, and the
/// host's side of the service seam (what backends call). Every method is thread-safe:
/// connections call it from their event loops, backends from any thread.
///
/// A connection's channels and requests are not here but in its ``ConnectionSlot``, behind
/// the connection's own lock; every id the host hands a backend says which slot it belongs
/// to. The lock here guards only what is counted across connections (admission, the list
/// of connections for shutdown), and the request path never takes it.
public final class HostCore: BackendHost, @unchecked Sendable {
    let configuration: HostConfiguration
    /// `configuration.responseTimeout`, as the event loops count time.
    let responseTimeout: TimeAmount
    /// How often at most a connection's timer looks for what is overdue: a 16th of the
    /// response timeout, at most a second. What is overdue is answered that much late at most.
    let answerCheckInterval: TimeAmount
    let logger: Logger
    /// The packages, and the loading and reloading that change them.
    let registry: PackageRegistry
    /// Where a client's `open` goes, and what `apps` tells it.
    let router: Router
    let state = Mutex(State())
    private let nextId = Atomic<UInt64>(1)
    /// When the host started (for `host.status`).
    let started = ContinuousClock.now
    /// One slot per connection the host may hold (TCP and local), handed out at admission.
    let slots: [ConnectionSlot]
    /// Read on every request: an atomic, not the state lock.
    private let stoppingFlag = Atomic<Bool>(false)
    /// Refusals and limits reached, logged at most once per interval each.
    let breaches: BreachLog
    /// Where launches run, and how many are in flight.
    let launcher: Launcher
    /// Totals since the host started, for `host.status` (and the rates `atrium status` shows):
    /// connections accepted (admitted or not), client requests and client launches received.
    let totals = Totals()
    /// The metrics `--metrics` serves; nil (and nothing recorded) without it.
    let metrics: HostMetrics?
    /// What the host listens on, as `atrium status` shows it (`tcp 127.0.0.1:7340`,
    /// `unix /run/user/1000/atrium/atriumd.sock`); set once the listeners are bound.
    let listeners = Mutex<[String]>([])
    /// The address of the TCP listener that serves TLS, and so HTTPS (transfers' links); set
    /// once it is bound.
    let httpsAddress = Mutex<SocketAddress?>(nil)

    /// The limits, kept apart from the rest of the configuration: the request path reads them
    /// for every frame, and they hold nothing that needs retaining.
    let admission: AdmissionLimits
    let limits: ProtocolLimits

    struct State {
        var connections: [UInt64: ConnectionLink] = [:]
        /// Slots no connection holds, taken from the end.
        var freeSlots: [UInt32] = []
        /// Open TCP connections per peer address (an IPv6 address's /64).
        var peers: [String: Int] = [:]
        /// Admitted connections still open, through TCP and through the local socket (counted
        /// from accept to close, so they include connections not yet or no longer in
        /// `connections`).
        var tcpConnections = 0
        var localConnections = 0
        /// The most connections open at once since memory was last given back, whether a
        /// backend was let go since (a reload, a worker's restart), and whether the last look
        /// found reason to give memory back at the next.
        var peakSinceTrim = 0
        var backendLetGoSinceTrim = false
        var transfersWentQuietSinceTrim = false
        var trimDue = false
        var shuttingDown = false
    }

    /// The event loops the connections run on: a worker process gets a link on each.
    let group: any EventLoopGroup

    /// `group`: the connections' event loops (by default NIO's shared ones).
    /// The host's identity (``TLSIdentity/fingerprint``), sent in `welcome`; nil when the
    /// host has none.
    public let identity: String?
    /// The tokens clients may come with.
    let tokens: TokenGate
    /// The paired devices and the pairing requests waiting for the operator.
    public let devices: DeviceRegistry
    /// Whether TCP clients must be paired devices (``HostConfiguration/pairingRequired``).
    public let pairingRequired: Bool
    /// Who may use the local socket.
    let localPeer: LocalPeer

    /// Unpairs a device (by its identity, or at least 8 of its first hex digits) and cuts off
    /// its connections; the future completes, on `eventLoop`, once every one of them is cut
    /// off (no frame of theirs is served after it).
    public func revoke(_ identity: String, on eventLoop: any EventLoop) -> EventLoopFuture<
        Result<DeviceRegistry.Device, PairingRefusal>
    > {
        let outcome = devices.revoke(identity)
        guard case .success(let device) = outcome else { return eventLoop.makeSucceededFuture(outcome) }
        audit?.record("device.revoked", ["device": device.identity, "name": device.name])
        tell(transfers.removeAll(of: .identity(device.identity)))
        var cutOff: [EventLoopFuture<Void>] = []
        for link in state.withLock({ Array($0.connections.values) }) {
            let done = link.eventLoop.makePromise(of: Void.self)
            link.run { connection in
                connection.session.deviceRevoked(device.identity, on: connection)
                done.succeed()
            }
            cutOff.append(done.futureResult)
        }
        return EventLoopFuture.andAllComplete(cutOff, on: eventLoop).map { outcome }
    }

    /// The audit log, if the operator asked for one.
    let audit: AuditLog?

    /// The host's transfers (CONTRACT section 8).
    let transfers: TransferService

    public init(
        configuration: HostConfiguration, logger: Logger, group: (any EventLoopGroup)? = nil, identity: String? = nil,
        audit: AuditLog? = nil
    ) {
        self.identity = identity
        let registry = PackageRegistry()
        self.registry = registry
        router = Router(registry: registry)
        self.audit = audit
        devices = DeviceRegistry(folder: configuration.stateFolder, logger: logger)
        tokens = TokenGate(
            store: TokenStore(folder: configuration.stateFolder), fileTokens: configuration.tokens)
        pairingRequired = configuration.pairingRequired
        localPeer = LocalPeer(group: configuration.socketGroup.flatMap { getgrnam($0)?.pointee.gr_gid })
        self.configuration = configuration
        responseTimeout = TimeAmount(configuration.responseTimeout)
        answerCheckInterval = min(.nanoseconds(responseTimeout.nanoseconds / 16), .seconds(1))
        self.logger = logger
        self.group = group ?? MultiThreadedEventLoopGroup.singleton
        admission = configuration.admission
        limits = configuration.limits
        metrics = configuration.metricsHost == nil ? nil : HostMetrics()
        breaches = BreachLog(logger: logger, interval: configuration.admission.breachLogInterval, metrics: metrics)
        launcher = Launcher(
            configuration: configuration, registry: registry, logger: logger, breaches: breaches, metrics: metrics)
        transfers = TransferService(
            folder: configuration.transferFolder ?? configuration.stateFolder.appendingPathComponent("transfers"),
            limits: configuration.transferLimits, logger: logger)
        let transfers = self.transfers
        transfers.hooks.withLock {
            $0 = TransferService.Hooks(
                deliver: { [registry] delivery in
                    guard let backend = registry.package(delivery.package)?.backend else {
                        return .later("package \(delivery.package) is not loaded")
                    }
                    return backend.upload(delivery)
                },
                ended: { [registry] record, why in
                    registry.package(record.package)?.backend?.transferEnded(record.id, why: why)
                })
        }
        let slotCount = max(configuration.admission.maxConnections, 1) + AdmissionLimits.maxLocalConnections
        slots = (0..<slotCount).map { ConnectionSlot(index: UInt32($0)) }
        state.withLock { $0.freeSlots = (0..<UInt32(slotCount)).reversed() }
    }

    /// The slot that handed out `id`, a channel's or a request's (any value: a backend's
    /// ids are not trusted).
    func slot(of id: UInt64) -> ConnectionSlot? {
        let index = ConnectionSlot.index(of: id)
        return index < slots.count ? slots[index] : nil
    }

    /// A fresh id, unique in this host, for a connection.
    func makeId() -> UInt64 {
        nextId.wrappingAdd(1, ordering: .relaxed).oldValue
    }

    // MARK: - Requests from clients

    /// Whether request `handle` still waits for its answer.
    func isPending(_ handle: UInt64) -> Bool {
        slot(of: handle)?.isPending(handle) ?? false
    }

    /// When what is sent now times out: the response timeout from `now`.
    func answerDeadline(from now: NIODeadline) -> NIODeadline {
        now + responseTimeout
    }

    /// Answers what a connection's timer found overdue (``ConnectionSlot/Book/takeOverdue(at:)``):
    /// a client's request no backend answered in time gets status 2 (ResourceLimitsExceeded)
    /// with the reason, and its backend hears it was abandoned; a backend's message the client
    /// did not answer in time is answered to the backend with status 2. On the connection's loop.
    func answerOverdue(_ overdue: ConnectionSlot.Overdue, on connection: ConnectionHandler) {
        let reason = "the service did not answer within \(describe(configuration.responseTimeout))"
        for (handle, request) in overdue.requests {
            request.backend.abandoned(request: handle, on: request.channel, timedOut: true)
            breaches.record(
                "response timeout \(request.backend.package)", reason,
                metadata: ["package": "\(request.backend.package)"])
            connection.channels.finish(
                request, status: .resourceLimitsExceeded, message: nil, error: reason, on: connection)
        }
        answer(overdue.messages, status: .resourceLimitsExceeded)
    }

    // MARK: - Connections

    /// Cuts off the connections whose token is no longer among the tokens (revoked while the
    /// host runs); called every few seconds.
    func checkRevokedTokens() {
        guard let names = tokens.revokedSinceLastLook() else { return }
        tell(transfers.removeTokens(notIn: names))
        for link in state.withLock({ Array($0.connections.values) }) {
            link.run { connection in connection.session.tokenStillValid(among: names, on: connection) }
        }
    }

    /// Tells each connection the state of a transfer of its that changed elsewhere (an outcome
    /// once it is journaled: ``TransferService/tell(_:to:paced:)``).
    func tell(_ states: [(link: TransferPeer, state: TransferStateFrame)]) {
        for (link, state) in states { transfers.tell(state, to: link) }
    }

    /// Removes the transfers whose callers may no longer open the service that made them (a
    /// reload took the service away, or its access no longer admits them); a package that only
    /// failed to load keeps them, for when it is back.
    func dropTransfersNoLongerOpenable() {
        let tokens = Dictionary(((try? self.tokens.store.tokens()) ?? []).map { ($0.name, $0.services) }) {
            first, _ in first
        }
        let pairingRequired = self.pairingRequired
        let devices = self.devices
        tell(
            transfers.remove { record in
                let caller: Router.Caller
                switch record.owner {
                case .localUser: caller = Router.Caller(isRemote: false, authorized: true)
                case .client: caller = Router.Caller(isRemote: true, authorized: true)
                case .identity(let identity):
                    caller = Router.Caller(
                        isRemote: true, authorized: !pairingRequired || devices.isPaired(identity), identity: identity)
                case .token(let name):
                    caller = Router.Caller(isRemote: true, authorized: true, tokenServices: tokens[name] ?? nil)
                }
                switch router.route(package: record.package, service: record.service, caller: caller) {
                case .success: return false
                case .failure(let refusal): return refusal.status != .appUnavailable
                }
            })
    }

    /// Expires transfers that made no progress for their expiry, and removes outcomes past
    /// their retention; at start and then every hour (more often with a short expiry).
    func sweepTransfers() {
        tell(transfers.sweep())
        transfers.deliverWaiting()
    }

    /// Counts a connection the listener has just accepted, or says why it may not stay: the
    /// host is shutting down, or it already has `maxConnections` TCP connections (local ones
    /// are counted apart, up to ``AdmissionLimits/maxLocalConnections``), or `peer` (a TCP
    /// client's address) already has `maxConnectionsPerPeer`. Called by ``AdmissionGate`` on
    /// the listener's loop, so connections are counted in the order they were accepted; an
    /// admitted connection is counted until ``leave(peer:isLocal:)``.
    func admit(peer: String?, isLocal: Bool) -> Result<ConnectionSlot, FrameError> {
        let limits = admission
        let slots = self.slots
        return state.withLock { state -> Result<ConnectionSlot, FrameError> in
            guard !state.shuttingDown else { return .failure(FrameError(.shuttingDown, "the host is shutting down")) }
            if isLocal {
                guard state.localConnections < AdmissionLimits.maxLocalConnections else {
                    return .failure(
                        FrameError(
                            .tooManyConnections,
                            "the host has \(AdmissionLimits.maxLocalConnections) local connections open, its limit"))
                }
            } else {
                guard state.tcpConnections < limits.maxConnections else {
                    return .failure(
                        FrameError(
                            .tooManyConnections,
                            "the host has \(limits.maxConnections) connections open, its limit (--max-connections)"))
                }
                if let peer, state.peers[peer, default: 0] >= limits.maxConnectionsPerPeer {
                    return .failure(
                        FrameError(
                            .tooManyConnections,
                            "\(peer) has \(limits.maxConnectionsPerPeer) connections open, the limit per address (--max-connections-per-peer)"
                        ))
                }
            }
            // There is a slot for every connection the limits allow.
            guard let index = state.freeSlots.popLast() else {
                return .failure(FrameError(.tooManyConnections, "the host has no room for another connection"))
            }
            if isLocal {
                state.localConnections += 1
            } else {
                if let peer { state.peers[peer, default: 0] += 1 }
                state.tcpConnections += 1
            }
            return .success(slots[Int(index)])
        }
    }

    /// An admitted connection has closed: it no longer counts against the limits, and its
    /// slot is free (emptied by the connection as it closed).
    func leave(peer: String?, isLocal: Bool, slot: ConnectionSlot) {
        state.withLock { state in
            state.freeSlots.append(slot.index)
            if isLocal {
                state.localConnections -= 1
                return
            }
            state.tcpConnections -= 1
            if let peer, let count = state.peers[peer] {
                state.peers[peer] = count > 1 ? count - 1 : nil
            }
        }
    }

    /// An admitted connection is up: from now on shutdown closes it. Refused only when
    /// shutdown began after the connection was admitted.
    func connectionOpened(_ link: ConnectionLink) -> FrameError? {
        state.withLock { state -> FrameError? in
            guard !state.shuttingDown else { return FrameError(.shuttingDown, "the host is shutting down") }
            state.connections[link.id] = link
            state.peakSinceTrim = max(state.peakSinceTrim, state.connections.count)
            return nil
        }
    }

    /// A connection is gone: it no longer counts for shutdown.
    func connectionClosed(_ id: UInt64) {
        _ = state.withLock { $0.connections.removeValue(forKey: id) }
    }

    /// The connections open now.
    var openConnections: [ConnectionLink] { state.withLock { Array($0.connections.values) } }

    var isShuttingDown: Bool { stoppingFlag.load(ordering: .relaxed) }

    /// A backend was let go (a reload retired a package, a worker process ended): the next
    /// look or the one after gives what it held back to the system.
    func backendLetGo() {
        state.withLock { $0.backendLetGoSinceTrim = true }
    }

    /// Gives freed memory back to the system once most connections of a burst are gone (at
    /// least 64 fewer than the peak, and fewer than half of it), or after a backend was let
    /// go, or once transfers' bytes stopped moving. glibc's allocator keeps freed memory for
    /// reuse (the host keeps up to 16 MiB free for the next chunks: ``MallocArenas``): without
    /// this, a burst of 10,000 connections would leave the host's RSS at its peak for good (95
    /// MiB against 31 MiB after the trim), and each reload or worker restart would leave a few
    /// pages of RSS that nothing uses (BENCHMARKS.md, "Churn"). Called every few seconds; a
    /// lock and two comparisons when nothing changed.
    func trimMemoryAfterBursts() {
        let transfersWentQuiet = transfers.wentQuietAfterMoving()
        let why = state.withLock { state -> String? in
            if transfersWentQuiet { state.transfersWentQuietSinceTrim = true }
            let open = state.connections.count
            let burst = state.peakSinceTrim - open >= 64 && open * 2 < state.peakSinceTrim
            guard burst || state.backendLetGoSinceTrim || state.transfersWentQuietSinceTrim else {
                state.trimDue = false
                return nil
            }
            // Not at the first look: closed connections' memory is freed a moment after they
            // are counted out (their pipelines are torn down on later turns of the loop), a
            // retired backend's once its last channel and callback let go of it.
            guard state.trimDue else {
                state.trimDue = true
                return nil
            }
            defer {
                state.peakSinceTrim = open
                state.backendLetGoSinceTrim = false
                state.transfersWentQuietSinceTrim = false
                state.trimDue = false
            }
            if burst { return "connections down from \(state.peakSinceTrim)" }
            return state.backendLetGoSinceTrim ? "a backend was let go" : "transfers' bytes stopped moving"
        }
        guard let why else { return }
        let released = atrium_release_free_memory()
        logger.debug("\(why): freed memory \(released == 1 ? "given back" : "kept")")
    }

    // MARK: - Channels of a backend, across connections

    /// A backend is gone (its worker process died): its channels are closed with status
    /// Unknown, and the requests waiting on them answered AppUnavailable (6) with `reason`.
    func backendFailed(_ backend: any ServiceBackend, reason: String) {
        closeChannels(of: backend, status: .unknown, requestStatus: .appUnavailable, reason: reason)
    }

    /// Closes every channel of `backend`, each on its connection's loop: clients get
    /// `closed` with `status`, requests waiting on them `requestStatus` with `reason`; the
    /// backend is told only when `status` is canceled (a backend that failed hears nothing).
    /// Waits until every connection has done it, unless called on an event loop (a failed
    /// worker's link): a reload then destroys the retired backend only after it heard of
    /// every channel.
    func closeChannels(
        of backend: any ServiceBackend, status: AppServiceClosedStatus, requestStatus: AppServiceResponseStatus,
        reason: String
    ) {
        var done: [EventLoopFuture<Void>] = []
        for link in openConnections {
            let promise = link.eventLoop.makePromise(of: Void.self)
            link.run { connection in
                connection.channels.closeChannels(
                    of: backend, status: status, requestStatus: requestStatus, reason: reason, on: connection)
                promise.succeed()
            }
            done.append(promise.futureResult)
        }
        guard MultiThreadedEventLoopGroup.currentEventLoop == nil else { return }
        for future in done { try? future.wait() }
    }

    // MARK: - Shutdown

    /// Stops taking new work, waits up to the drain timeout for requests in flight, answers
    /// the rest with status 4, closes every channel (clients get `closed`, plugins are told),
    /// closes the connections and destroys the plugins.
    func shutDown() async {
        await closeEveryConnection()
        // Every connection is closed: none should be left in memory (within a moment, while
        // their pipelines are torn down). The count is in the log for tests and operators.
        let settled = ContinuousClock.now + .seconds(1)
        while ConnectionHandler.live.load(ordering: .relaxed) > 0, ContinuousClock.now < settled {
            try? await Task.sleep(for: .milliseconds(10))
        }
        logger.info("connections left in memory: \(ConnectionHandler.live.load(ordering: .relaxed))")
        await stopEveryPackage()
    }

    /// Answers what every connection still waits for (after the drain timeout) and closes it.
    /// A function of its own: the links it holds (each holds its handler) are let go when it
    /// returns, before the count of handlers left in memory is read.
    private func closeEveryConnection() async {
        let connections = state.withLock { state -> [ConnectionLink] in
            state.shuttingDown = true
            stoppingFlag.store(true, ordering: .relaxed)
            return Array(state.connections.values)
        }
        logger.info("shutting down: \(connections.count) connections open")
        let deadline = ContinuousClock.now + configuration.drainTimeout
        func waiting() -> Int {
            connections.reduce(0) { sum, link in sum + link.slot.book.withLock { $0.pending.count } }
        }
        while ContinuousClock.now < deadline, waiting() > 0 {
            try? await Task.sleep(for: .milliseconds(10))
        }
        let leftover = waiting()
        if leftover > 0 {
            logger.warning("\(leftover) requests still unanswered at shutdown; answering them with status 4")
        }
        // Each connection answers what it still waits for and closes its channels, on its loop.
        var answered: [EventLoopFuture<Void>] = []
        for link in connections {
            let promise = link.eventLoop.makePromise(of: Void.self)
            link.run { connection in
                connection.channels.hostIsStopping(on: connection)
                promise.succeed()
            }
            answered.append(promise.futureResult)
        }
        for future in answered { try? await future.get() }
        var closes: [EventLoopFuture<Void>] = []
        for link in connections {
            let promise = link.eventLoop.makePromise(of: Void.self)
            link.run { connection in connection.close(promise: promise) }
            closes.append(promise.futureResult)
        }
        for close in closes { try? await close.get() }
        // Connections speaking HTTP (to transfers' links) are closed too: an upload's body
        // stops going to the spool before the transfers stop.
        let http = transfers.httpChannels.withLock { Array($0.values) }
        for channel in http { try? await channel.close() }
    }

    /// Stops every package's backend, all at once, and the launch pool.
    private func stopEveryPackage() async {
        // Under the reload lock: a reload under way finishes first, and none starts after.
        let stopping = registry.packagesAfterReloads()
        // Each package stops on a thread of its own, all at once: the exit waits for the
        // slowest (at most 5 seconds), not for all of them added up.
        let logger = self.logger
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let group = DispatchGroup()
            for package in stopping {
                guard let backend = package.backend else { continue }
                // A queue of its own (not the shared pool, whose few threads would all be
                // blocked here waiting for work the plugins' queues need those threads for).
                DispatchQueue(label: "atrium.shutdown.\(package.manifest.package)").async(group: group) {
                    if !backend.shutDown(within: .seconds(5)) {
                        logger.warning(
                            "package \(package.manifest.package) is still busy in a callback after 5 seconds; exiting without destroying it"
                        )
                    }
                }
            }
            group.notify(queue: .global()) { done.resume() }
        }
        // Launches still queued are answered as the host going away; running ones get 2
        // seconds to finish, then the exit goes on without them.
        let poolDone = DispatchSemaphore(value: 0)
        launcher.pool.shutdownGracefully { _ in poolDone.signal() }
        transfers.shutdown()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                _ = poolDone.wait(timeout: .now() + 2)
                done.resume()
            }
        }
        logger.info("shut down")
    }
}

/// A duration in words: `30 seconds`, `0.5 seconds`.
func describe(_ duration: Duration) -> String {
    let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    let text = seconds == seconds.rounded() ? String(Int64(seconds)) : String(seconds)
    return text + (seconds == 1 ? " second" : " seconds")
}

/// Counts that only grow, each an atomic of its own: bumped on the request path, read by
/// `host.status`.
final class Totals: Sendable {
    let connections = Atomic<UInt64>(0)
    let requests = Atomic<UInt64>(0)
    let launches = Atomic<UInt64>(0)
}
