import AtriumProtocol
import AtriumValues
import CAtriumPlugin
import CAtriumSystem
import Dispatch
public import Foundation
public import Logging
import NIOCore
import NIOPosix
import Synchronization

/// A package as the host knows it: its manifest, and its plugin or why it has none.
public struct LoadedPackage: Sendable {
    public var manifest: Manifest
    /// Why the plugin is not running, when it is not; the package then answers `open` with
    /// status 2 (AppUnavailable).
    public var loadError: String?
    /// Where the library was found.
    public var libraryPath: URL?
    let plugin: PluginInstance?
}

/// The heart of the host: the packages and their plugins, and the routing tables that tie
/// clients' channels and requests to plugins. Every method is thread-safe: connections call
/// it from their event loops, plugins from any thread.
///
/// Exactly-once answers rest on one rule: a request is answered by whoever removes it from
/// ``State/pending`` (the plugin's `respond`, the timeout, the channel closing, shutdown),
/// and removal happens under the lock.
public final class HostCore: @unchecked Sendable {
    let configuration: HostConfiguration
    let logger: Logger
    /// Set once by ``load(_:)`` before any connection is accepted; read-only afterwards.
    private(set) var packages: [LoadedPackage] = []
    private var packageIndex: [String: Int] = [:]
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
        var plugin: PluginInstance
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
        var plugin: PluginInstance
        /// The size of the request's message, counted against the connection's budget.
        var messageBytes: Int
        var timeout: Scheduled<Void>?
    }

    struct OutgoingRequest {
        var connection: ConnectionLink
        var channel: UInt64
        var plugin: PluginInstance
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

    public init(configuration: HostConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
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

    // MARK: - Loading

    /// Loads the plugins of `directory`'s manifests, in order. A plugin that fails to load is
    /// recorded with its reason; the others load regardless. Call once, before serving.
    public func load(_ directory: ManifestDirectory) {
        var loaded: [LoadedPackage] = []
        // Declared functions are serialised per library, across the packages that use it.
        var libraryQueues: [String: DispatchQueue] = [:]
        for manifest in directory.manifests {
            guard let library = manifest.library else {
                loaded.append(LoadedPackage(manifest: manifest, loadError: nil, libraryPath: nil, plugin: nil))
                continue
            }
            do {
                let folder = manifest.file.deletingLastPathComponent()
                if !manifest.functions.isEmpty {
                    let (path, handle) = try PluginLibrary.openHandle(
                        library, manifestFolder: folder, searchPath: configuration.pluginSearchPath, loaderSearch: true,
                        strictModes: configuration.strictModes
                    )
                    let service = FunctionService(functions: try DeclaredFunctions(manifest.functions, handle: handle))
                    var queue: DispatchQueue? = nil
                    if !manifest.concurrent {
                        queue =
                            libraryQueues[path.path]
                            ?? DispatchQueue(label: "atrium.functions.\(path.lastPathComponent)")
                        libraryQueues[path.path] = queue
                    }
                    let plugin = PluginInstance(
                        manifest: manifest, descriptor: FunctionService.descriptor, core: self, logger: logger,
                        queue: queue
                    )
                    service.plugin = plugin
                    plugin.start(builtIn: Unmanaged.passRetained(service).toOpaque())
                    loaded.append(LoadedPackage(manifest: manifest, loadError: nil, libraryPath: path, plugin: plugin))
                    continue
                }
                let (path, descriptor) = try PluginLibrary.open(
                    library, manifestFolder: folder, searchPath: configuration.pluginSearchPath,
                    strictModes: configuration.strictModes
                )
                let plugin = PluginInstance(manifest: manifest, descriptor: descriptor, core: self, logger: logger)
                try plugin.create()
                loaded.append(LoadedPackage(manifest: manifest, loadError: nil, libraryPath: path, plugin: plugin))
            } catch {
                logger.error(
                    "package not available: \(error.reason)",
                    metadata: ["package": "\(manifest.package)", "manifest": "\(manifest.file.lastPathComponent)"]
                )
                loaded.append(LoadedPackage(manifest: manifest, loadError: error.reason, libraryPath: nil, plugin: nil))
            }
        }
        packages = loaded
        packageIndex = Dictionary(
            uniqueKeysWithValues: loaded.enumerated().map { ($0.element.manifest.package, $0.offset) })
    }

    func package(_ name: String) -> LoadedPackage? {
        packageIndex[name].map { packages[$0] }
    }

    /// The `apps` listing: every package, its remote-capable services and its schemes.
    func apps() -> [AppInfo] {
        packages.map { package in
            AppInfo(
                package: package.manifest.package,
                displayName: package.manifest.displayName,
                services: package.manifest.services.filter(\.supportsRemoteSystems).map(\.name),
                schemes: package.manifest.schemes
            )
        }
    }

    // MARK: - Opening channels

    /// Which plugin serves `service` of `package` for this client, or the status that says why
    /// none does (CONTRACT section 4).
    func route(package name: String, service: String, isRemote: Bool) -> Result<PluginInstance, RouteRefusal> {
        guard let package = package(name) else {
            return .failure(RouteRefusal(.appNotInstalled, "no package \"\(name)\" is installed"))
        }
        guard let declared = package.manifest.service(named: service) else {
            if package.plugin == nil, let error = package.loadError {
                return .failure(RouteRefusal(.appUnavailable, "package \"\(name)\" is not available: \(error)"))
            }
            return .failure(RouteRefusal(.appServiceUnavailable, "package \"\(name)\" has no service \"\(service)\""))
        }
        guard let plugin = package.plugin else {
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
        return .success(plugin)
    }

    struct RouteRefusal: Error {
        var status: AppServiceConnectionStatus
        var reason: String
        init(_ status: AppServiceConnectionStatus, _ reason: String) {
            self.status = status
            self.reason = reason
        }
    }

    func addChannel(_ handle: UInt64, _ channel: OpenChannel) {
        state.withLock { $0.channels[handle] = channel }
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
    func addPending(_ request: PendingRequest) -> UInt64 {
        let handle = makeId()
        state.withLock { $0.pending[handle] = request }
        return handle
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
        let reason = "the service did not answer within \(describe(configuration.responseTimeout))"
        breaches.record(
            "response timeout \(request.plugin.package)", reason, metadata: ["package": "\(request.plugin.package)"])
        request.connection.run { connection in
            connection.finish(request, status: .resourceLimitsExceeded, message: nil, error: reason)
        }
    }

    /// A plugin's answer (the C table's `respond`).
    func respond(
        _ handle: UInt64,
        from plugin: PluginInstance,
        status: AppServiceResponseStatus,
        bytes: UnsafeRawBufferPointer,
        error: String?
    ) -> Int32 {
        var status = status
        var error = error
        var message: ByteBuffer? = nil
        var result = ATRIUM_OK
        if bytes.count > 0 {
            if bytes.count > limits.maxMessageBytes {
                status = .messageSizeTooLarge
                error =
                    "the service's answer is \(bytes.count) bytes, over the limit of \(limits.maxMessageBytes)"
                result = ATRIUM_E_TOO_LARGE
            } else {
                do {
                    _ = try ValueSet(cbor: bytes)
                    message = ByteBuffer(bytes: bytes)
                } catch let invalid {
                    status = .failure
                    error = "the service answered with a message that is not a ValueSet: \(invalid)"
                    result = ATRIUM_E_NOT_A_VALUESET
                }
            }
        }
        let taken = state.withLock { state -> PendingRequest? in
            guard let request = state.pending[handle], request.plugin === plugin else { return nil }
            return state.pending.removeValue(forKey: handle)
        }
        guard let request = taken else {
            plugin.logger.debug("an answer to request \(handle) came too late or twice; ignored")
            return ATRIUM_E_UNKNOWN_REQUEST
        }
        request.timeout?.cancel()
        if result != ATRIUM_OK {
            plugin.logger.warning("\(error ?? "")")
        }
        let (finalStatus, finalMessage, finalError) = (status, message, error)
        request.connection.run { connection in
            connection.finish(request, status: finalStatus, message: finalMessage, error: finalError)
        }
        return result
    }

    /// Answers a request on the plugin's behalf (when it cannot take requests at all).
    func answer(
        _ handle: UInt64, from plugin: PluginInstance, status: AppServiceResponseStatus, message: ByteBuffer?,
        error: String?
    ) {
        guard let request = takePending(handle) else { return }
        request.timeout?.cancel()
        request.connection.run { connection in
            connection.finish(request, status: status, message: message, error: error)
        }
    }

    // MARK: - Messages from plugins to clients

    /// The C table's `send`: a plugin's own message to the client of `channel`.
    func send(
        _ bytes: UnsafeRawBufferPointer, on handle: UInt64, from plugin: PluginInstance,
        requestId out: UnsafeMutablePointer<UInt64>?
    ) -> Int32 {
        guard bytes.count <= limits.maxMessageBytes else { return ATRIUM_E_TOO_LARGE }
        guard (try? ValueSet(cbor: bytes)) != nil else { return ATRIUM_E_NOT_A_VALUESET }
        let id = makeId()
        let message = ByteBuffer(bytes: bytes)
        let maxUnanswered = limits.maxInFlight
        let taken = state.withLock { state -> Result<OpenChannel, SendRefusal> in
            guard !state.shuttingDown else { return .failure(.shuttingDown) }
            guard let channel = state.channels[handle], channel.plugin === plugin else {
                return .failure(.unknownChannel)
            }
            // A client that does not answer cannot make the host hold the plugin's messages
            // without end: past maxInFlight unanswered ones on the channel, `send` says busy.
            guard channel.unanswered < maxUnanswered else { return .failure(.busy) }
            state.channels[handle]!.unanswered += 1
            state.outgoing[id] = OutgoingRequest(connection: channel.connection, channel: handle, plugin: plugin)
            return .success(channel)
        }
        let channel: OpenChannel
        switch taken {
        case .success(let open): channel = open
        case .failure(.shuttingDown): return ATRIUM_E_SHUTTING_DOWN
        case .failure(.unknownChannel): return ATRIUM_E_UNKNOWN_CHANNEL
        case .failure(.busy):
            breaches.record(
                "client not answering", "a client has \(maxUnanswered) of a service's messages unanswered",
                metadata: ["package": "\(plugin.package)"])
            return ATRIUM_E_BUSY
        }
        out?.pointee = id
        let timeout = channel.connection.eventLoop.scheduleTask(in: .init(configuration.responseTimeout)) {
            guard let outgoing = self.takeOutgoing(id, from: nil) else { return }
            outgoing.plugin.response(channel: handle, request: id, status: .resourceLimitsExceeded, message: nil)
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
        return ATRIUM_OK
    }

    enum SendRefusal: Error {
        case shuttingDown, unknownChannel, busy
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
                metadata: ["package": "\(outgoing.plugin.package)"])
            status = refusal.status
            message = nil
        } else if !status.isRepresentable {
            breaches.record(
                "invalid status", "a client answered with status \(status.rawValue), out of range; passed on as Unknown"
            )
            status = .unknown
        }
        outgoing.plugin.response(channel: outgoing.channel, request: response.id, status: status, message: message)
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

    /// The C table's `close_channel`.
    func closeChannel(_ handle: UInt64, from plugin: PluginInstance, status: AppServiceClosedStatus) -> Int32 {
        let owned = state.withLock { $0.channels[handle]?.plugin === plugin }
        guard owned, let (channel, pending, outgoing) = removeChannel(handle) else { return ATRIUM_E_UNKNOWN_CHANNEL }
        settle(pending: pending, outgoing: outgoing, reason: "the service closed the channel", outgoingStatus: .failure)
        channel.connection.run { connection in
            connection.channelClosedByService(clientChannel: channel.clientChannel, handle: handle, status: status)
        }
        plugin.closed(channel: handle, status: status, by: ATRIUM_CLOSED_BY_SERVICE)
        return ATRIUM_OK
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
        for (_, request) in pending {
            request.timeout?.cancel()
            if answerClients {
                request.connection.run { connection in
                    connection.finish(request, status: .failure, message: nil, error: reason)
                }
            }
        }
        for (id, request) in outgoing {
            request.timeout?.cancel()
            request.plugin.response(channel: request.channel, request: id, status: outgoingStatus, message: nil)
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
            channel.plugin.closed(channel: handle, status: .canceled, by: ATRIUM_CLOSED_BY_NETWORK)
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
            channel.plugin.closed(channel: handle, status: .canceled, by: ATRIUM_CLOSED_BY_HOST)
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
        for package in packages {
            guard let plugin = package.plugin else { continue }
            if !plugin.destroy(within: .seconds(5)) {
                logger.warning(
                    "package \(package.manifest.package) is still busy in a callback after 5 seconds; exiting without destroying it"
                )
            }
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
