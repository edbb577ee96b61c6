import AtriumProtocol
import AtriumValues
import Dispatch
import Logging
import NIOCore
import Synchronization

/// A way to reach a connection from any thread: work is run on its event loop.
struct ConnectionLink: Sendable {
    let id: UInt64
    let handler: NIOLoopBound<ConnectionHandler>
    /// Whether the connection's unsent output is over its high-water mark, readable from any
    /// thread: a backend's messages to a client that is not reading are refused (busy).
    let output: OutputGauge

    var eventLoop: any EventLoop { handler.eventLoop }

    /// Runs `body` with the connection's handler on its event loop (at once when already there).
    func run(_ body: @escaping @Sendable (ConnectionHandler) -> Void) {
        let handler = self.handler
        if eventLoop.inEventLoop {
            body(handler.value)
        } else {
            eventLoop.execute { body(handler.value) }
        }
    }
}

/// Whether a connection's unsent output is over its high-water mark.
final class OutputGauge: Sendable {
    private let blocked = Atomic<Bool>(false)

    var isBlocked: Bool {
        get { blocked.load(ordering: .relaxed) }
        set { blocked.store(newValue, ordering: .relaxed) }
    }
}

/// One client connection: the `hello` handshake, its channels, its requests in flight.
///
/// Everything here runs on the connection's event loop; backends are called only through
/// ``ServiceBackend`` (which never blocks the loop), and reach back through ``ConnectionLink``.
final class ConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = ClientFrame
    typealias OutboundIn = HostFrame
    typealias OutboundOut = HostFrame

    let core: HostCore
    /// Whether the client came through the local Unix socket (else it is remote, over TCP).
    let isLocal: Bool
    let id: UInt64
    private var logger: Logger
    private var context: ChannelHandlerContext?
    private(set) var link: ConnectionLink?

    private var helloReceived = false
    private var clientId = ""
    private var clientName: String?
    /// Whether the connection may stay, decided as it was accepted (``AdmissionGate``).
    private let ticket: AdmissionTicket
    /// Open channels: the client's channel number → the host's channel id and its backend.
    private var channels: [UInt64: (handle: UInt64, backend: any ServiceBackend)] = [:]
    /// Channel numbers whose `open` the backend has not answered yet, and the host's id for
    /// each attempt (an answer for an attempt that timed out is told apart by it).
    private var opening: [UInt64: (handle: UInt64, timeout: Scheduled<Void>)] = [:]
    /// Client requests handed to plugins and not answered yet, and their message bytes.
    private var inFlight = 0
    private var inFlightBytes = 0
    /// Launches started and not answered yet.
    private var launchesInFlight = 0
    private var isClosed = false
    /// Whether the client shut down its sending side: answers still due go out, then the
    /// connection closes.
    private var inputClosed = false
    /// When the last whole frame arrived, and the task that closes the connection when the
    /// hello deadline or the idle timeout passes.
    private var lastFrame = NIODeadline.now()
    private var deadline: Scheduled<Void>?
    /// Whether frames are being read now: writes then wait for `channelReadComplete` and go
    /// out with one flush (a pipelining client's answers travel together).
    private var inReadBurst = false
    private var flushPending = false

    /// How many handlers exist, open connections or not: what shutdown reports, so that a
    /// connection kept in memory after it closed shows.
    static let live = Atomic<Int>(0)

    deinit {
        Self.live.wrappingSubtract(1, ordering: .relaxed)
    }

    init(core: HostCore, isLocal: Bool, ticket: AdmissionTicket, logger: Logger) {
        Self.live.wrappingAdd(1, ordering: .relaxed)
        self.core = core
        self.isLocal = isLocal
        self.ticket = ticket
        self.id = core.makeId()
        limits = core.limits
        admission = core.admission
        var logger = logger
        logger[metadataKey: "connection"] = "\(id)"
        self.logger = logger
    }

    let limits: ProtocolLimits
    let admission: AdmissionLimits

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        link = ConnectionLink(id: id, handler: NIOLoopBound(self, eventLoop: context.eventLoop), output: output)
        if let remote = context.remoteAddress {
            logger[metadataKey: "peer"] = "\(remote)"
        }
    }

    /// The handler holds its own link (which holds the handler) and its context (which holds
    /// the channel, its pipeline and buffers): both are let go here, or every connection would
    /// stay in memory for good after it closed. Whoever still has a copy of the link (a
    /// request or launch in flight) keeps the handler only until it is done with it.
    func handlerRemoved(context: ChannelHandlerContext) {
        isClosed = true
        deadline?.cancel()
        deadline = nil
        link = nil
        self.context = nil
    }

    /// What the per-address limit counts a TCP client as: its IPv4 address, or the /64 of its
    /// IPv6 address (one network hands out a whole /64, so single addresses cost nothing).
    static func peerKey(_ address: SocketAddress) -> String? {
        guard case .v6(let v6) = address else { return address.ipAddress }
        let bytes = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
        // An IPv4 address mapped into IPv6 is that IPv4 address.
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff {
            return bytes[12...].map(String.init).joined(separator: ".")
        }
        return stride(from: 0, to: 8, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
            .joined(separator: ":") + "::/64"
    }

    func channelActive(context: ChannelHandlerContext) {
        guard let link else { return }
        if let refusal = ticket.refusal ?? core.connectionOpened(link) {
            core.breaches.record(
                "connection refused", "connection refused: \(refusal.message)",
                metadata: ["peer": "\(context.remoteAddress.map { "\($0)" } ?? "local")"])
            protocolError(refusal, log: false)
            return
        }
        admitted = true
        logger.debug("connected", metadata: ["local": "\(isLocal)"])
        armDeadline(after: admission.helloTimeout)
        context.fireChannelActive()
    }

    /// Whether the connection was admitted (and so is counted until it closes).
    private var admitted = false

    func channelInactive(context: ChannelHandlerContext) {
        isClosed = true
        deadline?.cancel()
        // Opens still unanswered keep their entries: a late success is then told it closed.
        for attempt in opening.values { attempt.timeout.cancel() }
        let handles = channels.values.map(\.handle)
        channels.removeAll()
        if admitted { core.connectionClosed(id, channels: handles) }
        logger.debug(
            "disconnected", metadata: ["channels closed": "\(handles.count)", "requests dropped": "\(inFlight)"])
        context.fireChannelInactive()
    }

    // MARK: - Deadlines

    /// Closes the connection at `delay` from now unless, by then, the deadline has moved:
    /// before `hello`, the hello deadline; after it, the idle timeout since the last frame.
    private func armDeadline(after delay: Duration) {
        guard let context else { return }
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        deadline = context.eventLoop.scheduleTask(in: .init(delay)) { handler.value.deadlinePassed() }
    }

    private func deadlinePassed() {
        guard !isClosed else { return }
        guard helloReceived else {
            core.breaches.record("hello timeout", level: .notice, "a connection sent no hello in time; closed")
            protocolError(
                FrameError(.timedOut, "no hello within \(describe(admission.helloTimeout)) of connecting"), log: false)
            return
        }
        let idle = NIODeadline.now() - lastFrame
        let timeout = TimeAmount(admission.idleTimeout)
        // Someone waiting for an answer is not idle.
        if idle < timeout || inFlight > 0 || launchesInFlight > 0 || !opening.isEmpty {
            let remaining = idle < timeout ? timeout - idle : timeout
            armDeadline(after: .nanoseconds(remaining.nanoseconds))
            return
        }
        core.breaches.record("idle timeout", level: .notice, "a connection sent nothing for the idle timeout; closed")
        protocolError(
            FrameError(.timedOut, "no frame for \(describe(admission.idleTimeout)), the idle timeout"), log: false)
    }

    // MARK: - Half-close and backpressure

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event {
            // The client will send nothing more but may still read: answer what is due first.
            inputClosed = true
            closeIfDrained()
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// After a half-close, closes the connection once nothing is left to answer.
    private func closeIfDrained() {
        guard inputClosed, !isClosed, inFlight == 0, launchesInFlight == 0, opening.isEmpty, let context else {
            return
        }
        isClosed = true
        context.flush()
        closeWhenFlushed(context.channel, giveUpAt: .now() + TimeAmount(admission.idleTimeout))
    }

    /// Closes `channel` once every byte written to it has gone out (a closing channel fails
    /// what is still buffered). Checks again every few milliseconds, for at most the idle
    /// timeout: a client that never reads is closed then all the same.
    private func closeWhenFlushed(_ channel: any Channel, giveUpAt: NIODeadline, wait: TimeAmount = .milliseconds(5)) {
        let buffered = (try? channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? 0
        guard buffered > 0, channel.isActive, NIODeadline.now() < giveUpAt else {
            channel.close(promise: nil)
            return
        }
        // Checks again soon, then less and less often (a client that reads slowly or not at
        // all costs a timer a second, not two hundred).
        let handler = NIOLoopBound(self, eventLoop: channel.eventLoop)
        let next = min(wait * 2, .seconds(1))
        channel.eventLoop.scheduleTask(in: wait) {
            handler.value.closeWhenFlushed(channel, giveUpAt: giveUpAt, wait: next)
        }
    }

    /// Backpressure: while the connection's unsent output is over the high-water mark, the
    /// host does not read from it (a client that does not read its answers cannot make the
    /// host buffer more of them); reading resumes once it is under the low-water mark. Done
    /// here rather than in a handler of its own, which would add a hop to every read and write.
    private var readHeld = false
    let output = OutputGauge()

    func read(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            context.read()
        } else {
            readHeld = true
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        output.isBlocked = !context.channel.isWritable
        if context.channel.isWritable {
            if readHeld {
                readHeld = false
                context.read()
            }
        } else {
            context.flush()
            core.breaches.record(
                "backpressure", level: .notice,
                "a client is not reading its answers; the host stops reading it until it does (\(admission.outputHighWaterBytes) bytes unsent)"
            )
        }
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let frameError = error as? FrameError {
            protocolError(frameError)
        } else {
            logger.notice("connection error: \(error)")
            context.close(promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        inReadBurst = false
        if flushPending {
            flushPending = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // After a protocol error, frames that were decoded in the same read are not acted on.
        guard !isClosed else { return }
        inReadBurst = true
        lastFrame = .now()
        let frame = unwrapInboundIn(data)
        guard helloReceived else {
            guard case .hello(let hello) = frame else {
                protocolError(FrameError(.helloRequired, "the first frame must be hello, not \(frame.type)"))
                return
            }
            handleHello(hello)
            return
        }
        switch frame {
        case .hello:
            protocolError(FrameError(.duplicateHello, "hello was already received on this connection"))
        case .open(let open):
            handleOpen(open)
        case .request(let request):
            handleRequest(request)
        case .response(let response):
            if !core.clientResponded(response, on: id) {
                logger.debug("a response to request \(response.id), which is not waiting for one; ignored")
            }
        case .close(let channel):
            handleClose(channel)
        case .launch(let launch):
            handleLaunch(launch)
        case .apps(let id):
            write(.apps(AppsFrame(id: id, apps: core.apps())))
        case .ping(let id):
            write(.pong(id: id))
        case .unknown(let type):
            let message = "unknown frame type \"\(untrusted(type, limit: 64))\""
            core.breaches.record("unknown frame type", level: .info, message)
            write(.error(ErrorFrame(code: .unknownType, message: message)))
        }
    }

    // MARK: - Frames

    private func handleHello(_ hello: HelloFrame) {
        guard hello.version == atriumProtocolVersion else {
            protocolError(
                FrameError(
                    .unsupportedVersion,
                    "protocol version \(hello.version) is not supported; this host speaks version \(atriumProtocolVersion)"
                )
            )
            return
        }
        if let refusal = core.tokenRefusal(hello.token, isLocal: isLocal) {
            core.breaches.record("token refused", "hello refused: \(refusal)")
            protocolError(FrameError(.notAuthorized, refusal), log: false)
            return
        }
        helloReceived = true
        clientId = hello.clientId
        clientName = hello.clientName
        logger[metadataKey: "client"] = "\(untrusted(hello.clientId, limit: 64))"
        deadline?.cancel()
        armDeadline(after: admission.idleTimeout)
        write(
            .welcome(
                WelcomeFrame(hostId: core.configuration.hostId, hostName: core.configuration.hostName, limits: limits)
            )
        )
    }

    private func handleOpen(_ open: OpenFrame) {
        if channels[open.channel] != nil || opening[open.channel] != nil {
            write(.error(ErrorFrame(code: "channelInUse", message: "channel \(open.channel) is already open")))
            return
        }
        let refuse = { (status: AppServiceConnectionStatus, reason: String) in
            self.core.breaches.record(
                "open refused", level: .info,
                "open \(untrusted(open.package, limit: 80))/\(untrusted(open.service, limit: 80)) refused: \(untrusted(reason))",
                metadata: ["status": "\(status)"])
            self.write(.opened(OpenedFrame(channel: open.channel, status: status)))
        }
        if core.isShuttingDown {
            refuse(.remoteSystemUnavailable, "the host is shutting down")
            return
        }
        if channels.count + opening.count >= limits.maxChannels {
            refuse(.unknown, "the connection already has \(limits.maxChannels) channels, the limit")
            return
        }
        switch core.route(package: open.package, service: open.service, isRemote: !isLocal) {
        case .failure(let refusal):
            refuse(refusal.status, refusal.reason)
        case .success(let backend):
            let handle = core.makeId()
            guard let link = self.link else { return }
            let info = ChannelInfo(
                id: handle, service: open.service, clientId: clientId, clientName: clientName, isRemote: !isLocal)
            // A backend that never answers `open` gets the response timeout, as a request does.
            let timeout = core.configuration.responseTimeout
            let timer = link.eventLoop.scheduleTask(in: .init(timeout)) {
                link.run { connection in
                    guard connection.opening[open.channel]?.handle == handle else { return }
                    connection.opening.removeValue(forKey: open.channel)
                    connection.core.breaches.record(
                        "open timeout \(backend.package)",
                        "package \(backend.package) did not answer open within \(describe(timeout)); refused as Unknown",
                        metadata: ["package": "\(backend.package)"])
                    connection.write(.opened(OpenedFrame(channel: open.channel, status: .unknown)))
                    connection.closeIfDrained()
                }
            }
            opening[open.channel] = (handle, timer)
            backend.open(info) { status in
                link.run { connection in
                    connection.opened(open, handle: handle, backend: backend, status: status)
                }
            }
        }
    }

    /// The backend answered an `open`.
    private func opened(
        _ open: OpenFrame, handle: UInt64, backend: any ServiceBackend, status: AppServiceConnectionStatus
    ) {
        guard let attempt = opening[open.channel], attempt.handle == handle else {
            // Answered after the host gave up on it (the client was told Unknown).
            if status == .success { backend.closed(channel: handle, status: .canceled, by: .host) }
            return
        }
        attempt.timeout.cancel()
        opening.removeValue(forKey: open.channel)
        guard !isClosed, let link else {
            if status == .success { backend.closed(channel: handle, status: .canceled, by: .network) }
            return
        }
        var status = status
        if status == .success {
            let added = core.addChannel(
                handle,
                HostCore.OpenChannel(
                    connection: link, clientChannel: open.channel, backend: backend, service: open.service,
                    clientId: clientId, isRemote: !isLocal)
            )
            if added {
                channels[open.channel] = (handle, backend)
                logger.debug("opened \(open.package)/\(untrusted(open.service, limit: 80)) as channel \(open.channel)")
            } else {
                // The package was reloaded while it answered: that version is gone (if it is
                // still winding down, it hears the channel is closed).
                status = .appUnavailable
                backend.closed(channel: handle, status: .canceled, by: .host)
            }
        }
        if status != .success {
            core.breaches.record(
                "open refused by service", level: .info,
                "open \(open.package)/\(untrusted(open.service, limit: 80)) refused by the service",
                metadata: ["status": "\(status)"])
        }
        write(.opened(OpenedFrame(channel: open.channel, status: status)))
        closeIfDrained()
    }

    private func handleRequest(_ request: RequestFrame) {
        func reply(_ status: AppServiceResponseStatus, _ reason: String) {
            write(.response(ResponseFrame(channel: request.channel, id: request.id, status: status, error: reason)))
        }
        guard let channel = channels[request.channel] else {
            reply(.failure, "channel \(request.channel) is not open")
            return
        }
        if core.isShuttingDown {
            reply(.remoteSystemUnavailable, "the host is shutting down")
            return
        }
        guard inFlight < limits.maxInFlight else {
            core.breaches.record("requests in flight", level: .notice, "a connection reached --max-in-flight")
            reply(.resourceLimitsExceeded, "more than \(limits.maxInFlight) requests in flight on this connection")
            return
        }
        let bytes = request.message.byteCount
        guard inFlightBytes + bytes <= admission.maxInFlightBytes || inFlight == 0 else {
            core.breaches.record("bytes in flight", level: .notice, "a connection reached --max-in-flight-bytes")
            reply(
                .resourceLimitsExceeded,
                "more than \(admission.maxInFlightBytes) bytes of requests in flight on this connection")
            return
        }
        if let refusal = core.checkMessage(request.message) {
            reply(refusal.status, refusal.reason)
            return
        }
        guard let link else { return }
        inFlight += 1
        inFlightBytes += bytes
        guard
            let handle = core.addPending(
                HostCore.PendingRequest(
                    connection: link, clientChannel: request.channel, clientRequest: request.id,
                    channel: channel.handle, backend: channel.backend, messageBytes: bytes
                )
            )
        else {
            inFlight -= 1
            inFlightBytes -= bytes
            reply(.failure, "channel \(request.channel) is closing")
            return
        }
        channel.backend.request(handle, on: channel.handle, message: request.message.buffer)
        core.armTimeout(handle, on: link.eventLoop)
    }

    /// Sends the answer to a client request (from the plugin, a timeout, or the host).
    func finish(
        _ request: HostCore.PendingRequest, status: AppServiceResponseStatus, message: ByteBuffer?, error: String?
    ) {
        inFlight -= 1
        inFlightBytes -= request.messageBytes
        defer { closeIfDrained() }
        let body = message.map { EncodedValueSet(uncheckedBytes: $0) } ?? .empty
        write(
            .response(
                ResponseFrame(
                    channel: request.clientChannel, id: request.clientRequest, status: status, message: body,
                    error: error
                )
            )
        )
    }

    private func handleClose(_ clientChannel: UInt64) {
        guard let channel = channels.removeValue(forKey: clientChannel) else {
            logger.debug("close of channel \(clientChannel), which is not open; ignored")
            return
        }
        guard let (_, pending, outgoing) = core.removeChannel(channel.handle) else { return }
        core.settle(pending: pending, outgoing: outgoing, reason: "the channel was closed", outgoingStatus: .failure)
        channel.backend.closed(channel: channel.handle, status: .completed, by: .client)
    }

    /// The service (or the host, shutting down) closed a channel: tell the client.
    func channelClosedByService(clientChannel: UInt64, handle: UInt64, status: AppServiceClosedStatus) {
        // Only if the number still names that channel: the client may have closed it and
        // opened another under the same number meanwhile, which stays open.
        if let current = channels[clientChannel] {
            guard current.handle == handle else { return }
            channels.removeValue(forKey: clientChannel)
        }
        write(.closed(ClosedFrame(channel: clientChannel, status: status)))
    }

    private func handleLaunch(_ launch: LaunchFrame) {
        let answer = { (outcome: LaunchOutcome) in
            self.write(.launched(LaunchedFrame(id: launch.id, status: outcome.status, error: outcome.error)))
        }
        guard launchesInFlight < admission.maxLaunchesPerConnection else {
            core.breaches.record(
                "launches per connection", level: .notice, "a connection reached --max-launches-per-connection")
            answer(
                LaunchOutcome(
                    status: .deniedByRemoteSystem,
                    error: "more than \(admission.maxLaunchesPerConnection) launches in flight on this connection"))
            return
        }
        guard core.takeLaunchSlot() else {
            core.breaches.record("launches", "the host reached --max-launches")
            answer(
                LaunchOutcome(
                    status: .deniedByRemoteSystem,
                    error: "the host has \(admission.maxLaunches) launches in flight, its limit"))
            return
        }
        if let data = launch.data, data.byteCount > core.configuration.launchDataLimit {
            core.releaseLaunchSlot()
            answer(
                LaunchOutcome(
                    status: .valueSetTooLarge,
                    error:
                        "the launch data is \(data.byteCount) bytes, over the limit of \(core.configuration.launchDataLimit)"
                ))
            return
        }
        launchesInFlight += 1
        let request = LaunchRequestInfo(
            uri: launch.uri, package: launch.package, fallbackUri: launch.fallbackUri,
            preferredPackages: launch.preferredPackages,
            data: launch.data.map { Array($0.buffer.readableBytesView) }
        )
        let core = self.core
        guard let link = self.link else { return }
        let (clientId, isRemote) = (self.clientId, !isLocal)
        // A handler may take a while (a program starting): it runs on the launch threads.
        core.launchPool.submit { state in
            let outcome =
                state == .active
                ? core.launch(
                    request, clientId: clientId, clientDescription: "client \(untrusted(clientId, limit: 64))",
                    isRemote: isRemote)
                : LaunchOutcome(status: .remoteSystemUnavailable, error: "the host is shutting down")
            core.releaseLaunchSlot()
            link.run { connection in
                connection.launchesInFlight -= 1
                connection.write(.launched(LaunchedFrame(id: launch.id, status: outcome.status, error: outcome.error)))
                connection.closeIfDrained()
            }
        }
    }

    // MARK: - Writing

    func write(_ frame: HostFrame) {
        guard !isClosed, let context else { return }
        if inReadBurst {
            context.write(wrapOutboundOut(frame), promise: nil)
            flushPending = true
        } else {
            context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        }
    }

    /// Answers a protocol error with an `error` frame, then closes the connection (all but
    /// `unknownType`, which is not sent through here). The message is cut and escaped: it may
    /// carry what the client sent.
    private func protocolError(_ error: FrameError, log: Bool = true) {
        let error = FrameError(error.code, untrusted(error.message, limit: 300))
        if log { core.breaches.record("protocol error", level: .notice, "protocol error: \(error)") }
        guard !isClosed, let context else { return }
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.error(ErrorFrame(error)))).whenComplete { _ in
            channel.close(promise: nil)
        }
        // A client that does not read would keep the write, and so the connection, pending
        // for ever: it gets a moment to read the error, then the connection closes anyway.
        channel.eventLoop.scheduleTask(in: Self.errorGrace) { channel.close(promise: nil) }
        isClosed = true
    }

    /// How long a client has to read an `error` frame before its connection is closed.
    static let errorGrace = TimeAmount.seconds(2)

    func close(promise: EventLoopPromise<Void>?) {
        guard let context else {
            promise?.succeed()
            return
        }
        context.close().whenComplete { _ in promise?.succeed() }
    }
}
