import AtriumProtocol
import AtriumValues
import CAtriumSystem
import Dispatch
public import Foundation
public import Logging
public import NIOCore
import NIOPosix
import Synchronization

/// A package as the host knows it: its manifest, and what serves it or why nothing does.
public struct LoadedPackage: Sendable {
    public var manifest: Manifest
    /// Why the package's backend is not running, when it is not; the package then answers
    /// `open` with status 2 (AppUnavailable).
    public var loadError: String?
    /// Where the library was found.
    public var libraryPath: URL?
    let backend: (any ServiceBackend)?
}

/// The heart of the host: the packages and their plugins, and the routing tables that tie
/// clients' channels and requests to plugins. Every method is thread-safe: connections call
/// it from their event loops, plugins from any thread.
///
/// Exactly-once answers rest on one rule: a request is answered by whoever removes it from
/// ``State/pending`` (the plugin's `respond`, the timeout, the channel closing, shutdown),
/// and removal happens under the lock.
public final class HostCore: BackendHost, @unchecked Sendable {
    let configuration: HostConfiguration
    let logger: Logger
    /// The packages, swapped whole by ``reload(_:)``: readers take the snapshot of the moment.
    let registry = Mutex(PackageRegistry())
    /// The packages now.
    var packages: [LoadedPackage] { registry.withLock { $0.packages } }
    /// Reloads one at a time, and the queues of declared functions' libraries they share.
    let reloading = Mutex<[String: DispatchQueue]>([:])
    let state = Mutex(State())
    private let nextId = Atomic<UInt64>(1)
    /// Refusals and limits reached, logged at most once per interval each.
    let breaches: BreachLog
    /// Where launches run: a few threads of their own, so that handlers that take a while
    /// (a program started with `wait`) never hold an event loop or Dispatch's shared pool.
    let launchPool: NIOThreadPool
    /// Launches in flight, from clients and plugins together (at most `admission.maxLaunches`).
    let launchesInFlight = Atomic<Int>(0)

    /// The limits, kept apart from the rest of the configuration: the request path reads them
    /// for every frame, and they hold nothing that needs retaining.
    let admission: AdmissionLimits
    let limits: ProtocolLimits

    struct OpenChannel {
        var connection: ConnectionLink
        var clientChannel: UInt64
        var backend: any ServiceBackend
        var service: String
        /// The client that opened it, for what a plugin does on its behalf (launches).
        var clientId: String
        var isRemote: Bool
        /// The plugin's messages on it that the client has not answered yet.
        var unanswered = 0
    }

    struct PendingRequest {
        var connection: ConnectionLink
        var clientChannel: UInt64
        var clientRequest: UInt64
        var channel: UInt64
        var backend: any ServiceBackend
        /// The size of the request's message, counted against the connection's budget.
        var messageBytes: Int
        var timeout: Scheduled<Void>?
    }

    struct OutgoingRequest {
        var connection: ConnectionLink
        var channel: UInt64
        var backend: any ServiceBackend
        var timeout: Scheduled<Void>?
    }

    struct State {
        var channels: [UInt64: OpenChannel] = [:]
        var pending: [UInt64: PendingRequest] = [:]
        var outgoing: [UInt64: OutgoingRequest] = [:]
        var connections: [UInt64: ConnectionLink] = [:]
        /// Open TCP connections per peer address (an IPv6 address's /64).
        var peers: [String: Int] = [:]
        /// Admitted connections still open, through TCP and through the local socket (counted
        /// from accept to close, so they include connections not yet or no longer in
        /// `connections`).
        var tcpConnections = 0
        var localConnections = 0
        /// The most connections open at once since memory was last given back, and whether
        /// the last look found enough of them gone to give memory back at the next.
        var peakSinceTrim = 0
        var trimDue = false
        var shuttingDown = false
    }

    /// The event loops the connections run on: a worker process gets a link on each.
    let group: any EventLoopGroup

    /// `group`: the connections' event loops (by default NIO's shared ones).
    public init(configuration: HostConfiguration, logger: Logger, group: (any EventLoopGroup)? = nil) {
        self.configuration = configuration
        self.logger = logger
        self.group = group ?? MultiThreadedEventLoopGroup.singleton
        admission = configuration.admission
        limits = configuration.limits
        breaches = BreachLog(logger: logger, interval: configuration.admission.breachLogInterval)
        launchPool = NIOThreadPool(numberOfThreads: min(max(configuration.admission.maxLaunches, 1), 16))
        launchPool.start()
    }

    /// Takes one of the launch slots, or says why there is none.
    func takeLaunchSlot() -> Bool {
        let limit = admission.maxLaunches
        var current = launchesInFlight.load(ordering: .relaxed)
        while current < limit {
            let (exchanged, original) = launchesInFlight.compareExchange(
                expected: current, desired: current + 1, ordering: .acquiringAndReleasing)
            if exchanged { return true }
            current = original
        }
        return false
    }

    func releaseLaunchSlot() {
        launchesInFlight.wrappingSubtract(1, ordering: .acquiringAndReleasing)
    }

    /// A fresh id, unique in this host, for a channel, a request or a connection.
    func makeId() -> UInt64 {
        nextId.wrappingAdd(1, ordering: .relaxed).oldValue
    }

    // MARK: - Opening channels

    /// Which backend serves `service` of `package` for this client, or the status that says
    /// why none does (CONTRACT section 4).
    func route(package name: String, service: String, isRemote: Bool) -> Result<any ServiceBackend, RouteRefusal> {
        guard let package = package(name) else {
            return .failure(RouteRefusal(.appNotInstalled, "no package \"\(name)\" is installed"))
        }
        guard let declared = package.manifest.service(named: service) else {
            if package.backend == nil, let error = package.loadError {
                return .failure(RouteRefusal(.appUnavailable, "package \"\(name)\" is not available: \(error)"))
            }
            return .failure(RouteRefusal(.appServiceUnavailable, "package \"\(name)\" has no service \"\(service)\""))
        }
        guard let backend = package.backend else {
            let reason = package.loadError ?? "it has no plugin"
            return .failure(RouteRefusal(.appUnavailable, "package \"\(name)\" is not available: \(reason)"))
        }
        if isRemote && !declared.supportsRemoteSystems {
            return .failure(
                RouteRefusal(
                    .remoteSystemNotSupportedByApp,
                    "service \"\(service)\" does not accept remote callers (supportsRemoteSystems is false)"
                )
            )
        }
        return .success(backend)
    }

    struct RouteRefusal: Error {
        var status: AppServiceConnectionStatus
        var reason: String
        init(_ status: AppServiceConnectionStatus, _ reason: String) {
            self.status = status
            self.reason = reason
        }
    }

    /// Records an open channel; false when its backend is no longer its package's (a reload
    /// retired it while the open was answered): the channel is then not opened. Checked under
    /// the lock that a reload's closing of the retired backend's channels takes after it
    /// swapped the packages, so no channel of a retired backend outlives the reload.
    func addChannel(_ handle: UInt64, _ channel: OpenChannel) -> Bool {
        state.withLock { state in
            guard registry.withLock({ $0.package(channel.backend.package)?.backend === channel.backend }) else {
                return false
            }
            state.channels[handle] = channel
            return true
        }
    }

    /// Removes a channel and everything waiting on it: its unanswered client requests and
    /// the plugin's unanswered messages to the client.
    func removeChannel(_ handle: UInt64) -> (OpenChannel, [UInt64: PendingRequest], [UInt64: OutgoingRequest])? {
        state.withLock { state in
            guard let channel = state.channels.removeValue(forKey: handle) else { return nil }
            let pending = state.pending.filter { $0.value.channel == handle }
            for key in pending.keys { state.pending.removeValue(forKey: key) }
            let outgoing = state.outgoing.filter { $0.value.channel == handle }
            for key in outgoing.keys { state.outgoing.removeValue(forKey: key) }
            return (channel, pending, outgoing)
        }
    }

    // MARK: - Requests from clients

    /// Records a request about to be handed to a plugin; returns the plugin's id for it. Its
    /// timeout is armed by ``armTimeout(_:on:)`` once the plugin has it.
    /// Nil when the channel is closed by now (its `closed` is on its way to the client).
    func addPending(_ request: PendingRequest) -> UInt64? {
        let handle = makeId()
        return state.withLock { state in
            guard state.channels[request.channel] != nil else { return nil }
            state.pending[handle] = request
            return handle
        }
    }

    /// Arms the response timeout of a request the plugin now has, unless it has answered
    /// already: a plugin called inline (Echo) answers before this, and then no timer is made
    /// and cancelled for every request (each would cost the event loop's timer queue a search).
    func armTimeout(_ handle: UInt64, on eventLoop: any EventLoop) {
        guard isPending(handle) else { return }
        let timeout = eventLoop.scheduleTask(in: .init(configuration.responseTimeout)) { self.timeOut(handle) }
        let stillPending = state.withLock { state -> Bool in
            guard state.pending[handle] != nil else { return false }
            state.pending[handle]!.timeout = timeout
            return true
        }
        if !stillPending { timeout.cancel() }
    }

    /// Whether request `handle` still waits for its answer.
    func isPending(_ handle: UInt64) -> Bool {
        state.withLock { $0.pending[handle] != nil }
    }

    func takePending(_ handle: UInt64) -> PendingRequest? {
        state.withLock { $0.pending.removeValue(forKey: handle) }
    }

    private func timeOut(_ handle: UInt64) {
        guard let request = takePending(handle) else { return }
        request.backend.abandoned(request: handle, on: request.channel, timedOut: true)
        let reason = "the service did not answer within \(describe(configuration.responseTimeout))"
        breaches.record(
            "response timeout \(request.backend.package)", reason, metadata: ["package": "\(request.backend.package)"])
        request.connection.run { connection in
            connection.finish(request, status: .resourceLimitsExceeded, message: nil, error: reason)
        }
    }

    // MARK: - The host's side of the seam: what backends call

    /// A backend's answer to a client's request. An answer that is over the message size
    /// limit or not a ValueSet reaches the client as status 5 or 1 with the reason, and the
    /// backend hears why (`.tooLarge`, `.notAValueSet`); an answer to a request that is no
    /// longer waiting (answered, timed out, its client gone) or that is another backend's
    /// is `.unknownRequest`. Any thread.
    func respond(
        to handle: UInt64,
        from backend: any ServiceBackend,
        status: AppServiceResponseStatus,
        message: ByteBuffer?,
        error: String?
    ) -> Result<Void, BackendCallError> {
        // Whose request it is comes first, and taking it settles who answers: an answer to
        // another backend's request, or to none, costs a lookup, not a check of its message.
        let taken = state.withLock { state -> PendingRequest? in
            guard let request = state.pending[handle], request.backend === backend else { return nil }
            return state.pending.removeValue(forKey: handle)
        }
        guard let request = taken else {
            logger.debug(
                "an answer to request \(handle) came too late or twice; ignored",
                metadata: ["package": "\(backend.package)"])
            return .failure(.unknownRequest)
        }
        request.timeout?.cancel()
        var status = status
        var error = error
        var message = message
        var result = Result<Void, BackendCallError>.success(())
        if let bytes = message, bytes.readableBytes > 0 {
            if bytes.readableBytes > limits.maxMessageBytes {
                status = .messageSizeTooLarge
                error =
                    "the service's answer is \(bytes.readableBytes) bytes, over the limit of \(limits.maxMessageBytes)"
                message = nil
                result = .failure(.tooLarge)
            } else if let invalid = Self.invalidity(of: bytes) {
                status = .failure
                error = "the service answered with a message that is not a ValueSet: \(invalid)"
                message = nil
                result = .failure(.notAValueSet)
            }
        } else {
            message = nil
        }
        if case .failure = result {
            logger.warning("\(error ?? "")", metadata: ["package": "\(backend.package)"])
        }
        let (finalStatus, finalMessage, finalError) = (status, message, error)
        request.connection.run { connection in
            connection.finish(request, status: finalStatus, message: finalMessage, error: finalError)
        }
        return result
    }

    var maxQueuedPerService: Int { admission.maxQueuedPerService }

    func queueWasFull(_ backend: any ServiceBackend, limit: Int) {
        breaches.record(
            "service queue full",
            "package \(backend.package) has \(limit) requests waiting, its limit (--max-queued-per-service)")
    }

    /// Why a backend's message is not a ValueSet, or nil when it is. Checked in place, with
    /// nothing decoded: the bytes go to the client as they are.
    static func invalidity(of message: ByteBuffer) -> String? {
        do {
            try EncodedValueSet(uncheckedBytes: message).validate()
            return nil
        } catch {
            return error.description
        }
    }

    /// Answers a request on its backend's behalf (when the backend cannot take it at all).
    func answer(_ handle: UInt64, status: AppServiceResponseStatus, error: String) {
        guard let request = takePending(handle) else { return }
        request.timeout?.cancel()
        request.connection.run { connection in
            connection.finish(request, status: status, message: nil, error: error)
        }
    }

    // MARK: - Messages from plugins to clients

    /// A backend's own message to the client of `channel`; returns the id the client's answer
    /// will come back under (``ServiceBackend/response(to:on:status:message:)``). Refused
    /// when the message is too large or not a ValueSet, the channel is not the backend's, the
    /// host is shutting down, or the client already has `maxInFlight` of the backend's
    /// messages unanswered or is not reading what the host writes it (`.busy`: a client that
    /// does not answer or read cannot make the host hold messages without end). Any thread.
    func send(_ message: ByteBuffer, on handle: UInt64, from backend: any ServiceBackend)
        -> Result<UInt64, BackendCallError>
    {
        guard message.readableBytes <= limits.maxMessageBytes else { return .failure(.tooLarge) }
        guard Self.invalidity(of: message) == nil else {
            return .failure(.notAValueSet)
        }
        let id = makeId()
        let maxUnanswered = limits.maxInFlight
        let taken = state.withLock { state -> Result<OpenChannel, BackendCallError> in
            guard !state.shuttingDown else { return .failure(.shuttingDown) }
            guard let channel = state.channels[handle], channel.backend === backend else {
                return .failure(.unknownChannel)
            }
            guard channel.unanswered < maxUnanswered, !channel.connection.output.isBlocked else {
                return .failure(.busy)
            }
            state.channels[handle]!.unanswered += 1
            state.outgoing[id] = OutgoingRequest(connection: channel.connection, channel: handle, backend: backend)
            return .success(channel)
        }
        let channel: OpenChannel
        switch taken {
        case .success(let open): channel = open
        case .failure(let refusal):
            if refusal == .busy {
                breaches.record(
                    "client not answering",
                    "a client has \(maxUnanswered) of a service's messages unanswered, or is not reading its output",
                    metadata: ["package": "\(backend.package)"])
            }
            return .failure(refusal)
        }
        let timeout = channel.connection.eventLoop.scheduleTask(in: .init(configuration.responseTimeout)) {
            guard let outgoing = self.takeOutgoing(id, from: nil) else { return }
            outgoing.backend.response(to: id, on: handle, status: .resourceLimitsExceeded, message: nil)
        }
        state.withLock { state in
            if state.outgoing[id] != nil { state.outgoing[id]!.timeout = timeout } else { timeout.cancel() }
        }
        channel.connection.run { connection in
            connection.write(
                .request(
                    RequestFrame(
                        channel: channel.clientChannel, id: id, message: EncodedValueSet(uncheckedBytes: message))))
        }
        return .success(id)
    }

    /// Removes a plugin's message waiting for its answer (only if it went to `connection`,
    /// when given), and counts it off its channel.
    private func takeOutgoing(_ id: UInt64, from connection: UInt64?) -> OutgoingRequest? {
        state.withLock { state -> OutgoingRequest? in
            guard let outgoing = state.outgoing[id], connection == nil || outgoing.connection.id == connection else {
                return nil
            }
            state.outgoing.removeValue(forKey: id)
            state.channels[outgoing.channel]?.unanswered -= 1
            return outgoing
        }
    }

    /// A client's answer to a plugin's message.
    func clientResponded(_ response: ResponseFrame, on connection: UInt64) -> Bool {
        guard let outgoing = takeOutgoing(response.id, from: connection) else { return false }
        outgoing.timeout?.cancel()
        var status = response.status
        var message: ByteBuffer? = response.message.buffer
        if let refusal = checkMessage(response.message) {
            // The plugin hears that the answer was refused; never the bytes themselves.
            breaches.record(
                "invalid answer", "a client's answer to a service's message was refused: \(refusal.reason)",
                metadata: ["package": "\(outgoing.backend.package)"])
            status = refusal.status
            message = nil
        } else if !status.isRepresentable {
            breaches.record(
                "invalid status", "a client answered with status \(status.rawValue), out of range; passed on as Unknown"
            )
            status = .unknown
        }
        outgoing.backend.response(to: response.id, on: outgoing.channel, status: status, message: message)
        return true
    }

    /// Why a message from a client may not reach a plugin (with the status that says so), or
    /// nil when it may: over `maxMessageBytes`, not a ValueSet, or over the values budget.
    func checkMessage(_ message: EncodedValueSet) -> (status: AppServiceResponseStatus, reason: String)? {
        guard message.byteCount <= limits.maxMessageBytes else {
            return (
                .messageSizeTooLarge,
                "the message is \(message.byteCount) bytes; the limit is \(limits.maxMessageBytes)"
            )
        }
        do {
            try message.validate(maxValues: admission.maxMessageValues)
        } catch {
            return (error.code == .tooLarge ? .messageSizeTooLarge : .failure, untrusted(error.description, limit: 400))
        }
        return nil
    }

    /// A backend closes one of its channels: the client is told with `status`, requests
    /// waiting on the channel are answered. `.unknownChannel` when it is not the backend's,
    /// or is closed already.
    func closeChannel(_ handle: UInt64, from backend: any ServiceBackend, status: AppServiceClosedStatus)
        -> Result<Void, BackendCallError>
    {
        let owned = state.withLock { $0.channels[handle]?.backend === backend }
        guard owned, let (channel, pending, outgoing) = removeChannel(handle) else { return .failure(.unknownChannel) }
        settle(pending: pending, outgoing: outgoing, reason: "the service closed the channel", outgoingStatus: .failure)
        channel.connection.run { connection in
            connection.channelClosedByService(clientChannel: channel.clientChannel, handle: handle, status: status)
        }
        backend.closed(channel: handle, status: status, by: .service)
        return .success(())
    }

    /// Answers requests left on a channel that is going away: the client's with status 1,
    /// the plugin's own messages with `outgoingStatus`.
    func settle(
        pending: [UInt64: PendingRequest],
        outgoing: [UInt64: OutgoingRequest],
        reason: String,
        outgoingStatus: AppServiceResponseStatus,
        answerClients: Bool = true
    ) {
        for (handle, request) in pending {
            request.timeout?.cancel()
            request.backend.abandoned(request: handle, on: request.channel, timedOut: false)
            if answerClients {
                request.connection.run { connection in
                    connection.finish(request, status: .failure, message: nil, error: reason)
                }
            }
        }
        for (id, request) in outgoing {
            request.timeout?.cancel()
            request.backend.response(to: id, on: request.channel, status: outgoingStatus, message: nil)
        }
    }

    // MARK: - Connections

    /// Why `hello.token` is refused, or nil when the client may go on. With no tokens
    /// configured, a client that sends one is refused: the host cannot check it and must not
    /// pretend it did. With tokens, a TCP client must send one of them; a local client (the
    /// Unix socket, the host's own user) needs none, but one it sends must be right.
    func tokenRefusal(_ token: String?, isLocal: Bool) -> String? {
        guard let tokens = configuration.tokens else {
            guard token == nil else {
                return
                    "this host has no tokens configured (--token-file), so it cannot check the one sent; connect without a token"
            }
            return nil
        }
        guard let token else {
            return isLocal ? nil : "this host requires a token in hello (ask its operator for one)"
        }
        // Compare with every token, in time that does not depend on where they differ.
        var matched = false
        let offered = Array(token.utf8)
        for candidate in tokens {
            let expected = Array(candidate.utf8)
            var difference = UInt8(expected.count == offered.count ? 0 : 1)
            for index in 0..<min(expected.count, offered.count) { difference |= expected[index] ^ offered[index] }
            matched = matched || difference == 0
        }
        return matched ? nil : "the token is not valid on this host"
    }

    /// Counts a connection the listener has just accepted, or says why it may not stay: the
    /// host is shutting down, or it already has `maxConnections` TCP connections (local ones
    /// are counted apart, up to ``AdmissionLimits/maxLocalConnections``), or `peer` (a TCP
    /// client's address) already has `maxConnectionsPerPeer`. Called by ``AdmissionGate`` on
    /// the listener's loop, so connections are counted in the order they were accepted; an
    /// admitted connection is counted until ``leave(peer:isLocal:)``.
    func admit(peer: String?, isLocal: Bool) -> FrameError? {
        let limits = admission
        return state.withLock { state -> FrameError? in
            guard !state.shuttingDown else { return FrameError(.shuttingDown, "the host is shutting down") }
            if isLocal {
                guard state.localConnections < AdmissionLimits.maxLocalConnections else {
                    return FrameError(
                        .tooManyConnections,
                        "the host has \(AdmissionLimits.maxLocalConnections) local connections open, its limit")
                }
                state.localConnections += 1
                return nil
            }
            guard state.tcpConnections < limits.maxConnections else {
                return FrameError(
                    .tooManyConnections,
                    "the host has \(limits.maxConnections) connections open, its limit (--max-connections)")
            }
            if let peer {
                let count = state.peers[peer, default: 0]
                guard count < limits.maxConnectionsPerPeer else {
                    return FrameError(
                        .tooManyConnections,
                        "\(peer) has \(limits.maxConnectionsPerPeer) connections open, the limit per address (--max-connections-per-peer)"
                    )
                }
                state.peers[peer] = count + 1
            }
            state.tcpConnections += 1
            return nil
        }
    }

    /// An admitted connection has closed: it no longer counts against the limits.
    func leave(peer: String?, isLocal: Bool) {
        state.withLock { state in
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

    /// A connection is gone: close its channels (plugins are told, as canceled), forget its
    /// requests (late answers are refused), and fail the plugins' messages to it.
    func connectionClosed(_ id: UInt64, channels: [UInt64]) {
        state.withLock { state in
            guard state.connections.removeValue(forKey: id) != nil else { return }
        }
        for handle in channels {
            guard let (channel, pending, outgoing) = removeChannel(handle) else { continue }
            settle(
                pending: pending, outgoing: outgoing, reason: "", outgoingStatus: .remoteSystemUnavailable,
                answerClients: false)
            channel.backend.closed(channel: handle, status: .canceled, by: .network)
        }
    }

    var isShuttingDown: Bool { state.withLock { $0.shuttingDown } }

    /// Gives the memory of connections that have gone back to the system once most of them
    /// are gone (at least 64 fewer than the peak, and fewer than half of it). glibc's
    /// allocator keeps freed memory for reuse: without this, a burst of 10,000 connections
    /// would leave the host's RSS at its peak for good (95 MiB against 31 MiB after the trim,
    /// BENCHMARKS.md). Called every few seconds; a lock and two comparisons when nothing changed.
    func trimMemoryAfterBursts() {
        let peak = state.withLock { state -> Int? in
            let open = state.connections.count
            guard state.peakSinceTrim - open >= 64, open * 2 < state.peakSinceTrim else {
                state.trimDue = false
                return nil
            }
            // Not at the first look: closed connections' memory is freed a moment after they
            // are counted out (their pipelines are torn down on later turns of the loop).
            guard state.trimDue else {
                state.trimDue = true
                return nil
            }
            defer {
                state.peakSinceTrim = open
                state.trimDue = false
            }
            return state.peakSinceTrim
        }
        guard let peak else { return }
        let released = atrium_release_free_memory()
        logger.debug("connections down from \(peak): freed memory \(released == 1 ? "given back" : "kept")")
    }

    // MARK: - Shutdown

    /// Stops taking new work, waits up to the drain timeout for requests in flight, answers
    /// the rest with status 4, closes every channel (clients get `closed`, plugins are told),
    /// closes the connections and destroys the plugins.
    func shutDown() async {
        let connections = state.withLock { state -> [ConnectionLink] in
            state.shuttingDown = true
            return Array(state.connections.values)
        }
        logger.info("shutting down: \(connections.count) connections open")
        let deadline = ContinuousClock.now + configuration.drainTimeout
        while ContinuousClock.now < deadline, state.withLock({ !$0.pending.isEmpty }) {
            try? await Task.sleep(for: .milliseconds(10))
        }
        let leftover = state.withLock { state in
            let pending = state.pending
            state.pending.removeAll()
            return pending
        }
        if !leftover.isEmpty {
            logger.warning("\(leftover.count) requests still unanswered at shutdown; answering them with status 4")
        }
        for (_, request) in leftover {
            request.timeout?.cancel()
            request.connection.run { connection in
                connection.finish(
                    request, status: .remoteSystemUnavailable, message: nil,
                    error: "the host shut down before the service answered")
            }
        }
        let channels = state.withLock { Array($0.channels.keys) }
        for handle in channels {
            guard let (channel, pending, outgoing) = removeChannel(handle) else { continue }
            settle(
                pending: pending, outgoing: outgoing, reason: "the host is shutting down",
                outgoingStatus: .remoteSystemUnavailable)
            channel.connection.run { connection in
                connection.channelClosedByService(
                    clientChannel: channel.clientChannel, handle: handle, status: .canceled)
            }
            channel.backend.closed(channel: handle, status: .canceled, by: .host)
        }
        var closes: [EventLoopFuture<Void>] = []
        for link in connections {
            let promise = link.eventLoop.makePromise(of: Void.self)
            link.run { connection in connection.close(promise: promise) }
            closes.append(promise.futureResult)
        }
        for close in closes { try? await close.get() }
        // Every connection is closed: none should be left in memory (within a moment, while
        // their pipelines are torn down). The count is in the log for tests and operators.
        let settled = ContinuousClock.now + .seconds(1)
        while ConnectionHandler.live.load(ordering: .relaxed) > 0, ContinuousClock.now < settled {
            try? await Task.sleep(for: .milliseconds(10))
        }
        logger.info("connections left in memory: \(ConnectionHandler.live.load(ordering: .relaxed))")
        // Under the reload lock: a reload under way finishes first, and none starts after.
        let stopping = reloading.withLock { _ in packages }
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
        // Launches still queued are answered as the host going away; running ones finish on
        // their own threads without holding up the exit.
        launchPool.shutdownGracefully { _ in }
        logger.info("shut down")
    }
}

/// A duration in words: `30 seconds`, `0.5 seconds`.
func describe(_ duration: Duration) -> String {
    let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    let text = seconds == seconds.rounded() ? String(Int64(seconds)) : String(seconds)
    return text + (seconds == 1 ? " second" : " seconds")
}
