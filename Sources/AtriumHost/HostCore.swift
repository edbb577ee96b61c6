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
    /// The library file an in-process backend runs, when that is known (a worker knows its
    /// own: the file at the library's path when its latest process began).
    var libraryFile: PluginLibrary.FileIdentity? = nil

    /// Whether the package cannot serve until it is loaded again: its library did not load,
    /// or its worker process crashed until it was given up. (A package of launches only has
    /// neither a backend nor an error, and serves.)
    var hasFailed: Bool {
        loadError != nil || backend?.health.state == .failed
    }

    /// Whether a file at the library's path is not the one the backend runs: one installed
    /// anew since it loaded. (No file there now is no new library to load.)
    var libraryReplaced: Bool {
        guard let libraryPath, let now = PluginLibrary.FileIdentity(libraryPath.path) else { return false }
        if let worker = backend as? WorkerProcess {
            // A worker that began while no file was there loaded one that came later, or none.
            return worker.libraryFile != now
        }
        guard let libraryFile else { return false }
        return libraryFile != now
    }

    /// Whether the backend is a worker process, which a restart loads the library into anew.
    var isWorker: Bool { backend is WorkerProcess }

    /// Its services' interfaces as `apps` sends them, encoded once for this version of the
    /// package.
    let interfaces = DescribedInterfaces()
}

/// A package's services' interfaces, encoded for `apps` answers: once per set of services
/// described (which services a caller is told of depends on what it may open), not once per
/// answer. A package of many commands makes an answer of close to a MiB, which a client could
/// otherwise ask the host to build again and again. Thread-safe.
final class DescribedInterfaces: Sendable {
    private let encodings = Mutex<[[String]: EncodedInterfaces]>([:])
    /// The most sets of services kept: each caller's access picks one, and there are few kinds.
    static let maxKept = 8

    /// The interfaces of `services` (each of which describes itself in `manifest`), in order.
    func encoded(_ services: [String], of manifest: Manifest) -> EncodedInterfaces {
        if let kept = encodings.withLock({ $0[services] }) { return kept }
        let byName = Dictionary(manifest.services.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        let encoded = EncodedInterfaces(
            services.sorted().compactMap { name in
                byName[name].flatMap { manifest.describedInterface(of: $0) }.map { (name, $0) }
            })
        encodings.withLock { encodings in
            if encodings.count >= Self.maxKept { encodings.removeAll() }
            encodings[services] = encoded
        }
        return encoded
    }
}

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
    /// The packages, swapped whole by ``reload(_:)``: readers take the snapshot of the moment.
    let registry = Mutex(PackageRegistry())
    /// The packages now.
    var packages: [LoadedPackage] { registry.withLock { $0.packages } }
    /// Reloads one at a time, and the queues of declared functions' libraries they share.
    let reloading = Mutex<[String: DispatchQueue]>([:])
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
    /// Where launches run: a few threads of their own, so that handlers that take a while
    /// (a program started with `wait`) never hold an event loop or Dispatch's shared pool.
    let launchPool: NIOThreadPool
    /// Launches in flight, from clients and plugins together (at most `admission.maxLaunches`).
    let launchesInFlight = Atomic<Int>(0)
    /// Totals since the host started, for `host.status` (and the rates `atrium status` shows):
    /// connections accepted (admitted or not), client requests and client launches received.
    let totals = Totals()
    /// The metrics `--metrics` serves; nil (and nothing recorded) without it.
    let metrics: HostMetrics?
    /// What the host listens on, as `atrium status` shows it (`tcp 127.0.0.1:7340`,
    /// `unix /run/user/1000/atrium/atriumd.sock`); set once the listeners are bound.
    let listeners = Mutex<[String]>([])

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
        var trimDue = false
        var shuttingDown = false
    }

    /// The event loops the connections run on: a worker process gets a link on each.
    let group: any EventLoopGroup

    /// `group`: the connections' event loops (by default NIO's shared ones).
    /// The host's identity (``TLSIdentity/fingerprint``), sent in `welcome`; nil when the
    /// host has none.
    public let identity: String?
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

    public init(
        configuration: HostConfiguration, logger: Logger, group: (any EventLoopGroup)? = nil, identity: String? = nil,
        audit: AuditLog? = nil
    ) {
        self.identity = identity
        self.audit = audit
        devices = DeviceRegistry(folder: configuration.stateFolder, logger: logger)
        tokens = TokenStore(folder: configuration.stateFolder)
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
        launchPool = NIOThreadPool(numberOfThreads: min(max(configuration.admission.maxLaunches, 1), 16))
        launchPool.start()
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

    /// A fresh id, unique in this host, for a connection.
    func makeId() -> UInt64 {
        nextId.wrappingAdd(1, ordering: .relaxed).oldValue
    }

    // MARK: - Opening channels

    /// Which backend serves `service` of `package` for this client, or the status that says
    /// why none does (CONTRACT section 4).
    /// Who opens a channel, as the service's access sees it.
    struct Caller {
        var isRemote: Bool
        /// A local client, a paired device, a client with a token, or any client where
        /// pairing is not required.
        var authorized: Bool
        /// The client's TLS identity, if it has one.
        var identity: String?
        /// The `PACKAGE/SERVICE` entries its token is limited to, if it came with such a token.
        var tokenServices: [String]? = nil
    }

    /// Where an open goes: the backend, and what the service takes, from the same version of
    /// the package.
    struct Route {
        var backend: any ServiceBackend
        /// The service's declared commands, which its requests are checked against.
        var interface: ServiceInterface?
    }

    func route(package name: String, service: String, caller: Caller) -> Result<Route, RouteRefusal> {
        guard let package = package(name) else {
            return .failure(RouteRefusal(.appNotInstalled, "no package \"\(name)\" is installed"))
        }
        guard let declared = package.manifest.service(named: service) else {
            if package.backend == nil, let error = package.loadError {
                return .failure(unavailable(name, error))
            }
            return .failure(RouteRefusal(.appServiceUnavailable, "package \"\(name)\" has no service \"\(service)\""))
        }
        guard let backend = package.backend else {
            return .failure(unavailable(name, package.loadError ?? "it has no plugin"))
        }
        let routed = Route(backend: backend, interface: declared.interface)
        guard caller.isRemote else { return .success(routed) }
        if let scope = caller.tokenServices, !scope.contains("\(name)/\(service)") {
            return .failure(
                RouteRefusal(.notAuthorized, "the client's token does not cover \(name)/\(service)"))
        }
        let notPaired = "this device is not paired with the host: pair first (atrium pair HOST)"
        switch declared.access {
        case .local:
            return .failure(
                RouteRefusal(
                    .remoteSystemNotSupportedByApp,
                    "service \"\(service)\" does not accept remote callers (supportsRemoteSystems is false)"
                )
            )
        case .any:
            return .success(routed)
        case .paired:
            guard caller.authorized else { return .failure(RouteRefusal(.notAuthorized, notPaired)) }
            return .success(routed)
        case .devices(let devices):
            guard caller.authorized else { return .failure(RouteRefusal(.notAuthorized, notPaired)) }
            guard let identity = caller.identity, devices.contains(where: { identity.hasPrefix($0) }) else {
                return .failure(
                    RouteRefusal(.notAuthorized, "service \"\(service)\" takes only the devices its manifest names"))
            }
            return .success(routed)
        }
    }

    /// The refusal of a package that is not available: why, except to a remote client, which
    /// is not told about the host's files and libraries.
    func unavailable(_ name: String, _ why: String) -> RouteRefusal {
        RouteRefusal(
            .appUnavailable, "package \"\(name)\" is not available: \(why)",
            forRemote: "package \"\(name)\" is not available: its plugin is not running (the host's log says why)")
    }

    struct RouteRefusal: Error {
        var status: AppServiceConnectionStatus
        var reason: String
        /// What a remote client is told, when it is less than `reason`.
        var forRemote: String?
        init(_ status: AppServiceConnectionStatus, _ reason: String, forRemote: String? = nil) {
            self.status = status
            self.reason = reason
            self.forRemote = forRemote
        }

        /// What the client is told: all of `reason` when it is local.
        func told(isRemote: Bool) -> String { isRemote ? forRemote ?? reason : reason }
    }

    /// Whether `backend` is still its package's (a reload has not retired it). A channel a
    /// backend accepts is recorded only if it is, on the connection's loop; a reload closes
    /// a retired backend's channels on each connection's loop after it swapped the
    /// packages, so no channel of a retired backend outlives the reload.
    func isCurrent(_ backend: any ServiceBackend) -> Bool {
        registry.withLock { $0.package(backend.package)?.backend === backend }
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
        guard let (request, link) = slot(of: handle)?.takePending(handle, of: backend) else {
            logger.debug(
                "an answer to request \(handle) came too late or twice; ignored",
                metadata: ["package": "\(backend.package)"])
            return .failure(.unknownRequest)
        }
        var status = status
        // A plugin's reason is its own words (a plugin is not trusted): escaped and cut.
        var error = error.map { untrusted($0, limit: Self.maxPluginReason) }
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
        link.run { connection in
            connection.channels.finish(
                request, status: finalStatus, message: finalMessage, error: finalError, on: connection)
        }
        return result
    }

    /// The most characters of a plugin's reason that reach a client.
    static let maxPluginReason = 1000

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
        guard let (request, link) = slot(of: handle)?.takePending(handle) else { return }
        link.run { connection in
            connection.channels.finish(request, status: status, message: nil, error: error, on: connection)
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
        let maxUnanswered = limits.maxInFlight
        guard !isShuttingDown else { return .failure(.shuttingDown) }
        guard let slot = slot(of: handle) else { return .failure(.unknownChannel) }
        let deadline = answerDeadline(from: .now())
        let taken = slot.book.withLock { book -> Result<(UInt64, UInt64, ConnectionLink), BackendCallError> in
            guard let channel = book.channel(handle, of: backend), let link = book.link else {
                return .failure(.unknownChannel)
            }
            guard channel.unanswered < maxUnanswered, !link.output.isBlocked else { return .failure(.busy) }
            book.channels[handle]!.unanswered += 1
            let id = book.makeId()
            book.outgoing[id] = ConnectionSlot.OutgoingRequest(channel: handle, backend: backend, deadline: deadline)
            return .success((id, channel.number, link))
        }
        let (id, number, link): (UInt64, UInt64, ConnectionLink)
        switch taken {
        case .success(let sent): (id, number, link) = sent
        case .failure(let refusal):
            if refusal == .busy {
                breaches.record(
                    "client not answering",
                    "a client has \(maxUnanswered) of a service's messages unanswered, or is not reading its output",
                    metadata: ["package": "\(backend.package)"])
            }
            return .failure(refusal)
        }
        // The connection's timer answers the backend at the deadline if the client has not.
        link.run { connection in
            connection.channels.sendServiceRequest(id, number: number, message: message, on: connection)
        }
        return .success(id)
    }

    /// A client's answer to a backend's message, on the connection's loop.
    func clientResponded(_ response: ResponseFrame, in slot: ConnectionSlot) -> Bool {
        guard let outgoing = slot.book.withLock({ $0.takeOutgoing(response.id) }) else { return false }
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
    /// waiting on the channel are answered, on the connection's loop. From now on the channel
    /// takes nothing more from the backend. `.unknownChannel` when it is not the backend's,
    /// or is closed or closing already.
    func closeChannel(_ handle: UInt64, from backend: any ServiceBackend, status: AppServiceClosedStatus)
        -> Result<Void, BackendCallError>
    {
        let link = slot(of: handle)?.book.withLock { book -> ConnectionLink? in
            guard book.channel(handle, of: backend) != nil else { return nil }
            book.channels[handle]!.closing = true
            return book.link
        }
        guard let link else { return .failure(.unknownChannel) }
        link.run { connection in
            connection.channels.closeChannel(
                handle, status: status, by: .service, requestStatus: .failure, reason: "the service closed the channel",
                on: connection)
        }
        return .success(())
    }

    /// Answers what was waiting on a channel that is going away: the client's requests with
    /// `requestStatus` (unless the client is gone), the backend's own messages with
    /// `outgoingStatus`. On the connection's loop.
    func settle(
        _ closed: ConnectionSlot.ClosedChannel,
        on connection: ConnectionHandler?,
        requestStatus: AppServiceResponseStatus,
        reason: String,
        outgoingStatus: AppServiceResponseStatus
    ) {
        for (handle, request) in closed.pending {
            request.backend.abandoned(request: handle, on: request.channel, timedOut: false)
            connection.map { $0.channels.finish(request, status: requestStatus, message: nil, error: reason, on: $0) }
        }
        answer(closed.outgoing, status: outgoingStatus)
    }

    /// Answers backends' messages to a client that will never answer them (taken out of their
    /// slot by the caller), with `status`.
    func answer(_ outgoing: [(UInt64, ConnectionSlot.OutgoingRequest)], status: AppServiceResponseStatus) {
        for (id, request) in outgoing {
            request.backend.response(to: id, on: request.channel, status: status, message: nil)
        }
    }

    // MARK: - Connections

    /// Why `hello.token` is refused, or nil when the client may go on. With no tokens
    /// configured, a client that sends one is refused: the host cannot check it and must not
    /// pretend it did. With tokens, a TCP client must send one of them; a local client (the
    /// Unix socket, the host's own user) needs none, but one it sends must be right.
    /// What a token in `hello` is: nothing (none sent), a token of `atriumd token` (with its
    /// name and services), or one of `--token-file` (every service); or why the client is
    /// refused.
    enum TokenVerdict {
        case none
        case managed(TokenStore.Token)
        case fromFile
    }

    func checkToken(_ token: String?, isLocal: Bool) -> Result<TokenVerdict, TokenRefusal> {
        if let token {
            if let managed = tokens.match(token) { return .success(.managed(managed)) }
            if configuration.tokens == nil {
                // Once `atriumd token` has been used (its file exists, even emptied by
                // revocations), a token that matches none is one that is unknown or revoked.
                return .failure(
                    TokenRefusal(
                        reason: FileManager.default.fileExists(atPath: tokens.file.path)
                            ? "the token is not valid on this host (unknown, or revoked)"
                            : "this host has no tokens (atriumd token create, or --token-file), so it cannot check the one sent; connect without a token"
                    ))
            }
        }
        if let refusal = tokenRefusal(token, isLocal: isLocal) { return .failure(TokenRefusal(reason: refusal)) }
        return .success(token == nil ? .none : .fromFile)
    }

    struct TokenRefusal: Error {
        var reason: String
    }

    /// The tokens of `atriumd token`, in the state folder.
    public let tokens: TokenStore
    /// The tokens' names at the last look for revoked ones, and those clients came with since.
    private let knownTokens = Mutex<Set<String>>([])

    /// A client came with the token `name`: its revocation must be noticed.
    func noteToken(_ name: String) {
        knownTokens.withLock { _ = $0.insert(name) }
    }

    /// Cuts off the connections whose token is no longer among the tokens (revoked while the
    /// host runs); called every few seconds.
    func checkRevokedTokens() {
        guard let names = try? Set(tokens.tokens().map(\.name)) else { return }
        // Only when a token is gone since the last look: the connections are left alone else.
        let gone = knownTokens.withLock { known in
            defer { known = names }
            return !known.isSubset(of: names)
        }
        guard gone else { return }
        for link in state.withLock({ Array($0.connections.values) }) {
            link.run { connection in connection.session.tokenStillValid(among: names, on: connection) }
        }
    }

    /// Why `--token-file` refuses the client, or nil (a host without one has nothing to refuse
    /// here: ``checkToken(_:isLocal:)`` has answered a token it cannot check).
    private func tokenRefusal(_ token: String?, isLocal: Bool) -> String? {
        guard let tokens = configuration.tokens else { return nil }
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
    /// go. glibc's allocator keeps freed memory for reuse: without this, a burst of 10,000
    /// connections would leave the host's RSS at its peak for good (95 MiB against 31 MiB
    /// after the trim), and each reload or worker restart would leave a few pages of RSS that
    /// nothing uses (BENCHMARKS.md, "Churn"). Called every few seconds; a lock and two
    /// comparisons when nothing changed.
    func trimMemoryAfterBursts() {
        let why = state.withLock { state -> String? in
            let open = state.connections.count
            let burst = state.peakSinceTrim - open >= 64 && open * 2 < state.peakSinceTrim
            guard burst || state.backendLetGoSinceTrim else {
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
                state.trimDue = false
            }
            return burst ? "connections down from \(state.peakSinceTrim)" : "a backend was let go"
        }
        guard let why else { return }
        let released = atrium_release_free_memory()
        logger.debug("\(why): freed memory \(released == 1 ? "given back" : "kept")")
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
    }

    /// Stops every package's backend, all at once, and the launch pool.
    private func stopEveryPackage() async {
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
        // Launches still queued are answered as the host going away; running ones get 2
        // seconds to finish, then the exit goes on without them.
        let poolDone = DispatchSemaphore(value: 0)
        launchPool.shutdownGracefully { _ in poolDone.signal() }
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
