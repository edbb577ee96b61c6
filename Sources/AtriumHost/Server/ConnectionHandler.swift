import AtriumProtocol
import AtriumTLS
import AtriumValues
import Dispatch
import Logging
import NIOCore
import Synchronization

/// A way to reach a connection from any thread: work is run on its event loop.
struct ConnectionLink: Sendable {
    let id: UInt64
    let handler: NIOLoopBound<ConnectionHandler>
    /// The connection's channels and requests, which backends reach from their threads.
    let slot: ConnectionSlot
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

/// One client connection: reads its frames, carries out what its ``ConnectionStateMachine``
/// decides, routes opens and requests to backends, and writes the answers.
///
/// Everything here runs on the connection's event loop; backends are called only through
/// ``ServiceBackend`` (which never blocks the loop), and from this loop only, in the order
/// things happened: a backend never gets a request on a channel after its `closed`. They
/// reach back through ``HostCore`` and the connection's ``ConnectionSlot``.
///
/// It reads and writes bytes: it cuts what it reads into frames itself (``FrameInput``) and
/// encodes what it writes, so that no frame value is boxed into the pipeline and cast back.
final class ConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let core: HostCore
    /// Whether the client came through the local Unix socket (else it is remote, over TCP).
    let isLocal: Bool
    /// Whether TLS carries the connection, and the client's identity then.
    let transport: ConnectionTransport
    /// Whether the client may use services, launch and list apps: a local client, any client
    /// when pairing is not required, or a paired device.
    private var authorized = false
    /// The `atriumd token` the client came with, and the services it covers (nil: all).
    private var tokenName: String?
    private var tokenServices: [String]?
    /// Where this connection's pairing stands, and its timeout.
    private var pairing = PairingStage.none
    private var pairingTimer: Scheduled<Void>?

    enum PairingStage {
        case none
        /// The host sent its nonce and waits for the client's.
        case awaitingReveal(id: UInt64, deviceName: String, commitment: String, hostNonce: String)
        /// The request is before the operator.
        case filed(UInt64)
    }
    let id: UInt64
    private var logger: Logger
    private var context: ChannelHandlerContext?
    private(set) var link: ConnectionLink?

    private var clientId = ""
    private var clientName: String?
    /// Whether the connection may stay, decided as it was accepted (``AdmissionGate``).
    private let ticket: AdmissionTicket
    private var machine: ConnectionStateMachine
    /// Set once the pipeline is gone: nothing is written any more.
    private var isRemoved = false
    private var isClosed: Bool { machine.isClosed || isRemoved }
    /// When the last whole frame arrived, and the task that closes the connection when the
    /// hello deadline or the idle timeout passes.
    private var lastFrame = NIODeadline.now()
    private var deadline: Scheduled<Void>?
    /// The connection's one response timer, and when it fires (``expectAnswers(by:)``).
    private var answerTimer: Scheduled<Void>?
    private var answerTimerDeadline: NIODeadline?
    /// Whether frames are being read now: writes then wait for `channelReadComplete` and go
    /// out with one flush (a pipelining client's answers travel together).
    private var inReadBurst = false
    /// Whether frames were written and not flushed yet: a flush is due at the end of a read
    /// (``write(_:)``).
    private var flushPending = false

    /// How many handlers exist, open connections or not: what shutdown reports, so that a
    /// connection kept in memory after it closed shows.
    static let live = Atomic<Int>(0)

    deinit {
        Self.live.wrappingSubtract(1, ordering: .relaxed)
    }

    init(
        core: HostCore, isLocal: Bool, ticket: AdmissionTicket, transport: ConnectionTransport = ConnectionTransport(),
        loopMetrics: LoopMetrics? = nil, logger: Logger
    ) {
        Self.live.wrappingAdd(1, ordering: .relaxed)
        // A remote client is held to a small frame limit until it is authorized (a paired
        // device, a token): what a stranger can make the host buffer, over the many connections
        // it may open, stays small.
        frameLimit = FrameLimit(
            bytes: Self.frameBytes(authorized: isLocal || !core.pairingRequired, limits: core.limits))
        input = FrameInput(
            maxFrameBytes: core.limits.maxFrameBytes, maxFirstFrameBytes: core.admission.maxHelloBytes,
            lowered: frameLimit)
        self.loopMetrics = loopMetrics
        self.transport = transport
        self.core = core
        self.isLocal = isLocal
        self.ticket = ticket
        self.id = core.makeId()
        limits = core.limits
        admission = core.admission
        machine = ConnectionStateMachine(
            budgets: .init(
                maxChannels: core.limits.maxChannels, maxInFlight: core.limits.maxInFlight,
                maxInFlightBytes: core.admission.maxInFlightBytes,
                maxLaunches: core.admission.maxLaunchesPerConnection))
        var logger = logger
        logger[metadataKey: "connection"] = "\(id)"
        self.logger = logger
    }

    let limits: ProtocolLimits
    let admission: AdmissionLimits
    /// The frame limit of this connection now: `limits.maxFrameBytes` once the client is
    /// authorized, ``unauthorizedFrameBytes`` before.
    private let frameLimit: FrameLimit
    /// The most bytes a frame of a client that is not authorized may have.
    static let unauthorizedFrameBytes = 64 << 10

    /// The frame limit of a client that is authorized, or not.
    private static func frameBytes(authorized: Bool, limits: ProtocolLimits) -> Int {
        authorized ? limits.maxFrameBytes : min(limits.maxFrameBytes, unauthorizedFrameBytes)
    }

    /// The client became authorized (or is no longer): its frame limit follows.
    private func authorizationChanged() {
        frameLimit.bytes = Self.frameBytes(authorized: authorized, limits: limits)
    }

    /// The limits this client is told in its welcome: the frame and message limits it has now.
    private var toldLimits: ProtocolLimits {
        var told = limits
        told.maxFrameBytes = min(limits.maxFrameBytes, frameLimit.bytes)
        told.maxMessageBytes = min(limits.maxMessageBytes, max(told.maxFrameBytes - 1024, 0))
        return told
    }
    /// What has been read of frames not yet whole; the first frame (hello) under its own limit.
    private var input: FrameInput<ClientFrame>
    /// Whether reading has stopped (a protocol error, the connection gone): nothing the client
    /// sends after is read.
    private var inputBroken = false
    /// Whether `channelRead` is handing on the frames of a read (and so modifying `input`).
    private var reading = false
    /// What `--metrics` records on this connection's loop.
    private let loopMetrics: LoopMetrics?
    /// With `--metrics`: when the frames of this read arrived (read once for all of them: a
    /// read's requests arrived together).
    private var burstArrived: NIODeadline?

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if case .success(let slot) = ticket.admission {
            link = ConnectionLink(
                id: id, handler: NIOLoopBound(self, eventLoop: context.eventLoop), slot: slot, output: output)
        }
        if let remote = context.remoteAddress {
            logger[metadataKey: "peer"] = "\(remote)"
        }
    }

    /// The handler holds its own link (which holds the handler) and its context (which holds
    /// the channel, its pipeline and buffers): both are let go here, or every connection would
    /// stay in memory for good after it closed. Whoever still has a copy of the link (a
    /// request or launch in flight) keeps the handler only until it is done with it.
    func handlerRemoved(context: ChannelHandlerContext) {
        isRemoved = true
        stopReading()
        deadline?.cancel()
        deadline = nil
        answerTimer?.cancel()
        answerTimer = nil
        answerTimerDeadline = nil
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
        let refusal: FrameError?
        switch ticket.admission {
        case .failure(let error): refusal = error
        case .success: refusal = link.flatMap { core.connectionOpened($0) }
        }
        if let refusal {
            core.breaches.record(
                "connection refused", "connection refused: \(refusal.message)",
                metadata: ["peer": "\(context.remoteAddress.map { "\($0)" } ?? "local")"])
            protocolError(refusal, log: false)
            return
        }
        guard let link else { return }
        if isLocal, let refusal = core.localPeer.refusal(of: LocalPeer.credentials(of: context.channel)) {
            audit("local.refused", ["reason": refusal])
            core.breaches.record("local client refused", "local connection refused: \(refusal)")
            admitted = true
            link.slot.book.withLock { $0.link = link }
            protocolError(FrameError(.notAuthorized, refusal), log: false)
            return
        }
        admitted = true
        link.slot.book.withLock { book in
            book.link = link
            book.isRemote = !isLocal
        }
        logger.debug("connected", metadata: ["local": "\(isLocal)"])
        armDeadline(after: admission.helloTimeout)
        context.fireChannelActive()
    }

    /// Whether the connection was admitted (and so is counted until it closes).
    private var admitted = false

    func channelInactive(context: ChannelHandlerContext) {
        if let truncation {
            core.breaches.record("protocol error", level: .notice, "protocol error: \(truncation)")
        }
        // What was read of an unfinished frame goes with the connection, whoever still holds
        // this handler (a launch or an open in flight).
        stopReading()
        // A pairing request leaves with its connection: there is no one left to tell.
        if case .filed(let number) = pairing { core.devices.withdraw(number, timedOut: false) }
        pairing = .none
        pairingTimer?.cancel()
        pairingTimer = nil
        let requests = machine.inFlight
        // Opens still unanswered keep their attempts: a late success is then told it closed.
        machine.connectionEnded()
        deadline?.cancel()
        var channels = 0
        if admitted, let slot = link?.slot {
            core.connectionClosed(id)
            // Every channel closes (backends are told, as canceled by the network), the
            // client's requests are forgotten (late answers are refused), and the backends'
            // messages to the client fail.
            let closed = slot.book.withLock { book in
                let closed = book.channels.keys.compactMap { book.removeChannel($0) }
                book.letGo()
                return closed
            }
            channels = closed.count
            for channel in closed {
                core.settle(
                    channel, on: nil, requestStatus: .failure, reason: "",
                    outgoingStatus: .remoteSystemUnavailable)
                channel.channel.backend.closed(channel: channel.handle, status: .canceled, by: .network)
            }
        }
        logger.debug("disconnected", metadata: ["channels closed": "\(channels)", "requests dropped": "\(requests)"])
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
        guard !isRemoved else { return }
        switch machine.deadlinePassed(
            idle: NIODeadline.now() - lastFrame, idleTimeout: TimeAmount(admission.idleTimeout))
        {
        case .none:
            return
        case .helloTimeout:
            core.breaches.record("hello timeout", level: .notice, "a connection sent no hello in time; closed")
            protocolError(
                FrameError(.timedOut, "no hello within \(describe(admission.helloTimeout)) of connecting"), log: false)
        case .idleTimeout:
            core.breaches.record(
                "idle timeout", level: .notice, "a connection sent nothing for the idle timeout; closed")
            protocolError(
                FrameError(.timedOut, "no frame for \(describe(admission.idleTimeout)), the idle timeout"), log: false)
        case .rearm(let remaining):
            armDeadline(after: .nanoseconds(remaining.nanoseconds))
        }
    }

    /// Makes sure the connection's timer fires by `deadline`, for a request or a message in
    /// the slot that must be answered by then. One timer a connection, set for the earliest
    /// deadline and set again for the next when it fires: a request answered in time costs
    /// no timer of its own, made and cancelled (each would cost the loop's timer queue a
    /// search and a few allocations).
    ///
    /// Set again, it waits at least ``HostCore/answerCheckInterval``: a firing looks at every
    /// entry of the slot, so a service that keeps thousands of messages waiting on a client
    /// that never answers (each with its own deadline) costs a look at them that often, not at
    /// each deadline. What is overdue is answered that much late at most.
    private func expectAnswers(by deadline: NIODeadline) {
        if let armed = answerTimerDeadline, armed <= deadline { return }
        guard !isRemoved, let context else { return }
        answerTimer?.cancel()
        answerTimerDeadline = deadline
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        answerTimer = context.eventLoop.scheduleTask(deadline: deadline) { handler.value.answerTimerFired() }
    }

    /// Answers what is overdue (requests with status 2, messages to the backend with status 2)
    /// and sets the timer for the next deadline left.
    private func answerTimerFired() {
        answerTimer = nil
        answerTimerDeadline = nil
        guard !isRemoved, let slot = link?.slot else { return }
        let now = NIODeadline.now()
        let overdue = slot.book.withLock { $0.takeOverdue(at: now) }
        core.answerOverdue(overdue, on: self)
        if let next = overdue.next { expectAnswers(by: max(next, now + core.answerCheckInterval)) }
    }

    // MARK: - Half-close and backpressure

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event {
            if framesWaiting {
                inputClosedWhilePaused = true
            } else {
                inputClosed()
            }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func inputClosed() {
        if let truncation {
            protocolError(truncation)
            return
        }
        // The client will send nothing more but may still read: answer what is due first.
        machine.inputDidClose()
        answerOutgoingAfterInputClosed()
        closeIfDrained()
    }

    /// After a half-close the client can answer nothing more: the backends' messages waiting
    /// for its answer are answered now (RemoteSystemUnavailable), not at their timeout. A
    /// service that waits for such an answer before it answers the client's own request
    /// would otherwise hold the connection, and its slot, for the whole response timeout.
    private func answerOutgoingAfterInputClosed() {
        guard let slot = link?.slot else { return }
        let waiting = slot.book.withLock { book -> [(UInt64, ConnectionSlot.OutgoingRequest)] in
            let ids = Array(book.outgoing.keys)
            return ids.compactMap { id in book.takeOutgoing(id).map { (id, $0) } }
        }
        core.answer(waiting, status: .remoteSystemUnavailable)
    }

    /// After a half-close, closes the connection once nothing is left to answer.
    private func closeIfDrained() {
        guard !isRemoved, let context, machine.shouldCloseWhenDrained() else { return }
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
        if context.channel.isWritable && !framesWaiting {
            context.read()
        } else {
            readHeld = true
        }
    }

    /// Whether the next frame of a read may be acted on now: not while the unsent output is
    /// over the high-water mark. One read can carry hundreds of small frames, each asking for
    /// a large answer (`apps` of a package with many commands): they wait, unread, until the
    /// client has taken what it was sent (``resumeFrames(context:)``), so that what one read
    /// asks for is held to the same limit as what many reads do.
    private func mayTakeNextFrame(_ context: ChannelHandlerContext) -> Bool {
        if unflushedBytes >= admission.outputHighWaterBytes {
            // Under TLS the bytes written are not counted against the channel's water marks
            // until they are flushed through the TLS handler.
            flushPending = false
            unflushedBytes = 0
            context.flush()
        }
        return context.channel.isWritable || isClosed || inputBroken
    }

    /// Whether frames of the last read wait for the output to drain (`input.isPaused`, kept
    /// apart because a flush can call back into this handler while `input` is being modified).
    private var framesWaiting = false

    /// Acts on the frames of a read that waited for the output to drain, then reads again.
    private func resumeFrames(context: ChannelHandlerContext) {
        guard framesWaiting, !reading, !isRemoved, !inputBroken else { return }
        reading = true
        inReadBurst = true
        do {
            try input.resume { frame in
                received(frame, context: context)
                return mayTakeNextFrame(context)
            }
        } catch {
            protocolError(error)
        }
        reading = false
        if inputBroken { input.drop() }
        framesWaiting = input.isPaused
        inReadBurst = false
        flushIfPending()
        guard !framesWaiting else { return }
        if inputClosedWhilePaused {
            inputClosedWhilePaused = false
            inputClosed()
        }
        if readHeld, context.channel.isWritable {
            readHeld = false
            context.read()
        }
    }

    /// The client's input ended while frames of its last read waited (``resumeFrames(context:)``
    /// acts on the end once it has acted on them).
    private var inputClosedWhilePaused = false

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        output.isBlocked = !context.channel.isWritable
        if context.channel.isWritable {
            if framesWaiting {
                resumeFrames(context: context)
            } else if readHeld {
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
            // A stranger can cause these at will (a failed TLS handshake, a reset): counted,
            // not logged one by one. Not a breach: a client that ends without a TLS close
            // (most command-line clients) causes one too.
            core.breaches.record(
                "connection error", level: .notice, "connection error: \(error)",
                metadata: ["peer": "\(context.remoteAddress.map { "\($0)" } ?? "local")"], isBreach: false)
            context.close(promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        inReadBurst = false
        burstArrived = nil
        if flushPending {
            flushPending = false
            unflushedBytes = 0
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !isRemoved, !inputBroken else { return }
        // `input` is being modified until every frame of this read has been handled, and
        // handling one may close the connection at once: nothing touches `input` while
        // `reading` (see `stopReading`). Nothing comes back to `channelRead` meanwhile: NIO
        // delivers a read from the event loop, never from a write, a close or a read() asked for.
        reading = true
        defer {
            reading = false
            if inputBroken { input.drop() }
            framesWaiting = input.isPaused
        }
        do {
            try input.read(unwrapInboundIn(data)) { frame in
                received(frame, context: context)
                return mayTakeNextFrame(context)
            }
        } catch {
            protocolError(error)
        }
    }

    /// The client's stream ended inside a frame, while it was still being read.
    private var truncation: FrameError? {
        reading || inputBroken ? nil : input.truncation
    }

    /// Nothing more the client sends is read, and what is held of an unfinished frame is let
    /// go (at the end of the read under way, if there is one).
    private func stopReading() {
        inputBroken = true
        if !reading { input.drop() }
    }

    private func received(_ frame: ClientFrame, context: ChannelHandlerContext) {
        // After a protocol error, frames that were decoded in the same read are not acted on:
        // the state machine, closed by the error, ignores them (below), and nothing more is
        // read (`inputBroken`).
        guard !isRemoved else { return }
        let isHello: Bool
        if case .hello = frame { isHello = true } else { isHello = false }
        switch machine.frameReceived(isHello: isHello, type: frame.type) {
        case .ignore: return
        case .protocolError(let error):
            protocolError(error)
            return
        case .handle: break
        }
        inReadBurst = true
        lastFrame = .now()
        if !authorized, let refusal = unpairedRefusal(frame) {
            core.breaches.record(
                "unpaired client refused", level: .info, "\(frame.type) from a device that is not paired")
            var fields = ["frame": frame.type]
            if case .launch(let launch) = frame {
                fields["scheme"] = untrusted(launch.uri.split(separator: ":").first.map(String.init) ?? "", limit: 64)
            }
            audit("unpaired.refused", fields)
            write(refusal)
            countRefusedFrame()
            return
        }
        switch frame {
        case .hello(let hello):
            handleHello(hello)
        case .open(let open):
            handleOpen(open)
        case .request(let request):
            handleRequest(request)
        case .response(let response):
            if let slot = link?.slot, !core.clientResponded(response, in: slot) {
                logger.debug("a response to request \(response.id), which is not waiting for one; ignored")
            }
        case .close(let channel):
            handleClose(channel)
        case .launch(let launch):
            handleLaunch(launch)
        case .apps(let id, let package):
            write(.apps(AppsFrame(id: id, apps: core.apps(for: caller, package: package))))
        case .ping(let id):
            write(.pong(id: id))
        case .pair(let pair):
            handlePair(pair)
        case .pairReveal(let id, let nonce):
            handlePairReveal(id: id, nonce: nonce)
        case .admin(let admin):
            handleAdmin(admin)
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
        let verdict: HostCore.TokenVerdict
        switch core.checkToken(hello.token, isLocal: isLocal) {
        case .failure(let refusal):
            audit("token.refused", ["reason": refusal.reason])
            core.breaches.record("token refused", "hello refused: \(refusal.reason)")
            protocolError(FrameError(.notAuthorized, refusal.reason), log: false)
            return
        case .success(let checked):
            verdict = checked
        }
        if transport.isTLS, let pipeline = context?.pipeline.syncOperations {
            transport.identify(in: pipeline)
            guard transport.peerIdentity != nil else {
                protocolError(FrameError(.notAuthorized, "TLS without a client certificate: present an identity"))
                return
            }
        }
        machine.helloAccepted()
        authorized = isLocal || !core.pairingRequired || (transport.peerIdentity.map(core.devices.isPaired) ?? false)
        if case .managed(let token) = verdict {
            // A token serves its holder as a paired device is served, within its services.
            authorized = true
            tokenName = token.name
            tokenServices = token.services
            core.noteToken(token.name)
        }
        if authorized, let identity = transport.peerIdentity, core.pairingRequired {
            core.devices.seen(identity, from: peerAddress)
        }
        authorizationChanged()
        link?.slot.book.withLock { $0.clientId = hello.clientId }
        clientId = hello.clientId
        clientName = hello.clientName
        logger[metadataKey: "client"] = "\(untrusted(hello.clientId, limit: 64))"
        if let identity = transport.peerIdentity { logger[metadataKey: "identity"] = "\(identity)" }
        if hello.token != nil { audit("token.accepted", tokenName.map { ["token": $0] } ?? [:]) }
        logger.debug("hello", metadata: ["transport": "\(transport.isTLS ? "TLS" : isLocal ? "local" : "plain TCP")"])
        deadline?.cancel()
        armDeadline(after: admission.idleTimeout)
        write(
            .welcome(
                WelcomeFrame(
                    hostId: core.configuration.hostId, hostName: core.configuration.hostName, limits: toldLimits,
                    hostIdentity: core.identity, kind: core.configuration.kind,
                    responseTimeoutMilliseconds: UInt64(core.configuration.responseTimeout.seconds * 1000))
            )
        )
    }

    /// What an unpaired client gets for `frame` (CONTRACT section 7: only hello, ping and
    /// pair are served before pairing), or nil when the frame is served.
    private func unpairedRefusal(_ frame: ClientFrame) -> HostFrame? {
        let reason =
            "this device is not paired with the host: pair first (atrium pair HOST), and have the host's operator accept it"
        switch frame {
        case .open:
            // The service's access decides: an unpaired device may open only a service whose
            // manifest says "any".
            return nil
        case .launch(let launch):
            return .launched(LaunchedFrame(id: launch.id, status: .deniedByRemoteSystem, error: reason))
        case .apps:
            return .error(ErrorFrame(code: .notAuthorized, message: reason))
        case .admin(let admin):
            return .adminResult(
                AdminResultFrame(id: admin.id, status: 1, error: "admin commands are taken on the local socket only"))
        case .request(let request):
            return .response(
                ResponseFrame(channel: request.channel, id: request.id, status: .authenticationError, error: reason))
        case .response(let response):
            return .error(
                ErrorFrame(code: .notAuthorized, message: "response \(response.id) answers nothing: \(reason)"))
        case .close(let channel):
            return .error(ErrorFrame(code: .notAuthorized, message: "channel \(channel) is not open: \(reason)"))
        case .hello, .ping, .pair, .pairReveal, .unknown:
            return nil
        }
    }

    /// Writes a security event to the audit log, with who the client is. The events of a
    /// client that is not authorized are aggregated by its address (``AuditLog``), unless
    /// `always` (a pairing request, which the operator must see, and which the pairing limits
    /// bound already).
    func audit(_ event: String, _ fields: [String: String] = [:], always: Bool = false) {
        guard let audit = core.audit else { return }
        var fields = fields
        if !clientId.isEmpty { fields["client"] = untrusted(clientId, limit: 64) }
        fields["transport"] = isLocal ? "local" : transport.isTLS ? "tls" : "tcp"
        if !isLocal {
            fields["address"] = peerAddress
            if let identity = transport.peerIdentity { fields["device"] = identity }
        }
        audit.record(event, fields, stranger: authorized || always ? nil : peerAddress)
    }

    /// How many frames of this connection were refused because it is not authorized: one
    /// that keeps sending them is closed at ``maxRefusedFrames``.
    private var refusedFrames = 0
    /// The most frames refused to a client that is not authorized before its connection is
    /// closed: a client that pairs, or opens what it may, does not send many.
    static let maxRefusedFrames = 32

    /// Counts a frame refused because the client is not authorized; past the limit, the
    /// connection is closed with a reason.
    private func countRefusedFrame() {
        guard !authorized else { return }
        refusedFrames += 1
        guard refusedFrames > Self.maxRefusedFrames else { return }
        core.breaches.record(
            "unpaired client closed", level: .info,
            "a connection that is not paired sent \(Self.maxRefusedFrames) refused frames; closed")
        protocolError(
            FrameError(
                .notAuthorized,
                "\(Self.maxRefusedFrames) frames refused: this device is not paired with the host; pair first (atrium pair HOST)"
            ), log: false)
    }

    /// The client's address, for the log and the paired devices' list.
    private var peerAddress: String {
        guard !isLocal, let address = context?.remoteAddress else { return "local" }
        return address.ipAddress ?? "\(address)"
    }

    private func handlePair(_ pair: PairFrame) {
        let id = pair.id
        let answer = { (status: PairingStatus, error: String?) in
            self.write(.paired(PairedFrame(id: id, status: status, error: error)))
        }
        if authorized && (isLocal || !core.pairingRequired) {
            answer(.paired, nil)
            return
        }
        guard let identity = transport.peerIdentity, core.identity != nil else {
            answer(
                .notPossible, "pairing needs TLS: a device is known by its TLS identity, and this connection has none")
            return
        }
        if core.devices.isPaired(identity) {
            authorized = true
            authorizationChanged()
            answer(.paired, nil)
            return
        }
        guard case .none = pairing else {
            answer(.notPossible, "this connection already asked to pair")
            return
        }
        // Counted before anything else is done for it: each attempt is a try at the code.
        // Each address (an IPv6 address's /64) has its share of attempts.
        if let refusal = core.devices.admitAttempt(from: context?.remoteAddress.flatMap(Self.peerKey) ?? peerAddress) {
            core.breaches.record("pairing refused", level: .info, "a pairing attempt refused: \(refusal)")
            answer(.notPossible, refusal.description)
            return
        }
        let deviceName = DeviceRegistry.cleanName(pair.deviceName)
        let timeout = TimeAmount(core.configuration.pairingTimeout)
        guard let commitment = pair.commitment else {
            file(id: id, deviceName: deviceName, code: nil)
            return
        }
        guard PairingCode.isWellFormed(commitment) else {
            answer(.notPossible, "the commitment must be 64 lowercase hex digits (a SHA-256)")
            return
        }
        let hostNonce = PairingCode.makeNonce()
        pairing = .awaitingReveal(id: id, deviceName: deviceName, commitment: commitment, hostNonce: hostNonce)
        pairingTimer = context?.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [self] in
            guard case .awaitingReveal = pairing else { return }
            pairing = .none
            write(.paired(PairedFrame(id: id, status: .timedOut, error: "the nonce was not revealed in time")))
        }
        write(.pairNonce(id: id, nonce: hostNonce))
    }

    private func handlePairReveal(id: UInt64, nonce: String) {
        guard case .awaitingReveal(let expected, let deviceName, let commitment, let hostNonce) = pairing,
            expected == id
        else {
            write(.paired(PairedFrame(id: id, status: .notPossible, error: "no pairing of this id waits for a nonce")))
            return
        }
        pairing = .none
        pairingTimer?.cancel()
        pairingTimer = nil
        guard PairingCode.isWellFormed(nonce), PairingCode.commitment(to: nonce) == commitment else {
            core.breaches.record("pairing refused", level: .info, "a pairing nonce that does not match its commitment")
            write(
                .paired(
                    PairedFrame(
                        id: id, status: .notPossible, error: "the nonce does not match the commitment sent in pair")
                ))
            return
        }
        file(id: id, deviceName: deviceName, code: (clientNonce: nonce, hostNonce: hostNonce))
    }

    /// Puts the pairing before the operator, with its verification code (from both nonces
    /// when the client committed to one).
    private func file(id: UInt64, deviceName: String, code nonces: (clientNonce: String, hostNonce: String)?) {
        guard let identity = transport.peerIdentity, let hostIdentity = core.identity else { return }
        let code =
            nonces.map {
                PairingCode.between(
                    host: hostIdentity, client: identity, clientNonce: $0.clientNonce, hostNonce: $0.hostNonce)
            } ?? PairingCode.between(host: hostIdentity, client: identity)
        let link = self.link
        let filed = core.devices.request(
            identity: identity, deviceName: deviceName, address: peerAddress, code: code
        ) { status, error in
            link?.run { connection in connection.pairingDecided(id: id, status: status, error: error) }
        }
        switch filed {
        case .failure(let refusal):
            write(.paired(PairedFrame(id: id, status: .notPossible, error: refusal.description)))
        case .success(let request):
            audit(
                "pairing.requested",
                ["request": "\(request.number)", "name": deviceName, "code": code, "committed": "\(nonces != nil)"],
                always: true)
            pairing = .filed(request.number)
            let devices = core.devices
            pairingTimer = context?.eventLoop.scheduleTask(in: TimeAmount(core.configuration.pairingTimeout)) {
                devices.withdraw(request.number, timedOut: true)
            }
            logger.notice(
                "pairing request \(request.number) from \"\(deviceName)\" at \(peerAddress): verification code \(code); accept with `atrium pairing accept \(request.number)`, refuse with `atrium pairing refuse \(request.number)`",
                metadata: ["identity": "\(identity)"])
            if nonces == nil {
                logger.warning(
                    "pairing request \(request.number) came without a commitment: its code depends on the identities alone, which someone in the middle able to make a million keys in \(core.configuration.pairingTimeout) could match; accept it only over a network you trust"
                )
            }
        }
    }

    /// The operator decided this connection's pairing request (or it timed out).
    func pairingDecided(id: UInt64, status: PairingStatus, error: String?) {
        audit(
            status == .paired ? "pairing.accepted" : status == .refused ? "pairing.refused" : "pairing.timedOut",
            always: true)
        pairing = .none
        pairingTimer?.cancel()
        pairingTimer = nil
        if status == .paired {
            authorized = true
            authorizationChanged()
        }
        write(.paired(PairedFrame(id: id, status: status, error: error)))
    }

    /// Tokens were revoked: if this connection came with one that is gone, it is cut off now.
    func tokenStillValid(among names: Set<String>) {
        guard let tokenName, !names.contains(tokenName) else { return }
        self.tokenName = nil
        authorized = false
        audit("token.revoked", ["token": tokenName])
        // The operator's own doing, not a breach by the client.
        logger.info("a connection of token \(tokenName) cut off: the token was revoked")
        protocolError(
            FrameError(.notAuthorized, "this connection's token was revoked by the host's operator"), log: false)
    }

    /// A device was unpaired: if it is this connection's, the connection is cut off now.
    func deviceRevoked(_ identity: String) {
        guard transport.peerIdentity == identity, !isLocal, core.pairingRequired else { return }
        authorized = false
        // The operator's own doing, not a breach by the client.
        logger.info("a connection of device \(identity) cut off: its pairing was revoked")
        protocolError(
            FrameError(.notAuthorized, "this device's pairing was revoked by the host's operator"), log: false)
    }

    private func handleAdmin(_ admin: AdminFrame) {
        guard isLocal else {
            core.breaches.record("admin command refused", level: .info, "an admin command from a TCP client refused")
            write(
                .adminResult(
                    AdminResultFrame(
                        id: admin.id, status: 1, error: "admin commands are taken on the local socket only")))
            return
        }
        guard let eventLoop = context?.eventLoop else { return }
        AdminCommands.run(admin, core: core, on: eventLoop).assumeIsolated().whenSuccess { outcome in
            switch outcome {
            case .success(let result):
                self.write(.adminResult(AdminResultFrame(id: admin.id, status: 0, result: EncodedValueSet(result))))
            case .failure(let refusal):
                self.write(.adminResult(AdminResultFrame(id: admin.id, status: 1, error: refusal.description)))
            }
        }
    }

    /// Who this client is, as a service's access sees it.
    private var caller: HostCore.Caller {
        HostCore.Caller(
            isRemote: !isLocal, authorized: authorized, identity: transport.peerIdentity, tokenServices: tokenServices)
    }

    private func handleOpen(_ open: OpenFrame) {
        guard let link else { return }
        let (isOpen, openChannels) = link.slot.book.withLock { ($0.numbers[open.channel] != nil, $0.channels.count) }
        // The reason goes to the log and, as the `opened` frame's error, to the client (a remote
        // one is told less about the host's files).
        let refuse = { (refusal: HostCore.RouteRefusal) in
            let (status, reason) = (refusal.status, refusal.reason)
            var metadata: Logger.Metadata = ["status": "\(status)"]
            if !self.isLocal {
                metadata["device"] = "\(self.transport.peerIdentity ?? "none (plain TCP)")"
                metadata["address"] = "\(self.peerAddress)"
            }
            self.audit(
                "open",
                [
                    "package": untrusted(open.package, limit: 80), "service": untrusted(open.service, limit: 80),
                    "status": "\(status)", "reason": untrusted(reason),
                ])
            // No such package or service, or one that is down, is an ordinary outcome; access,
            // policy and limits are breaches.
            let ordinary: [AppServiceConnectionStatus] = [.appNotInstalled, .appServiceUnavailable, .appUnavailable]
            self.core.breaches.record(
                status == .notAuthorized ? "open not authorized" : "open refused", level: .info,
                "open \(untrusted(open.package, limit: 80))/\(untrusted(open.service, limit: 80)) refused: \(untrusted(reason))",
                metadata: metadata, isBreach: !ordinary.contains(status))
            let told = refusal.told(isRemote: !self.isLocal)
            self.write(.opened(OpenedFrame(channel: open.channel, status: status, error: untrusted(told, limit: 400))))
            self.countRefusedFrame()
        }
        switch machine.openReceived(open.channel, isOpen: isOpen, openChannels: openChannels) {
        case .numberInUse:
            write(.error(ErrorFrame(code: "channelInUse", message: "channel \(open.channel) is already open")))
            return
        case .tooManyChannels:
            refuse(
                HostCore.RouteRefusal(.unknown, "the connection already has \(limits.maxChannels) channels, the limit"))
            return
        case .proceed:
            break
        }
        if core.isShuttingDown {
            refuse(HostCore.RouteRefusal(.remoteSystemUnavailable, "the host is shutting down"))
            return
        }
        switch core.route(package: open.package, service: open.service, caller: caller) {
        case .failure(let refusal):
            refuse(refusal)
        case .success(let route):
            let backend = route.backend
            let handle = link.slot.book.withLock { $0.makeId() }
            let info = ChannelInfo(
                id: handle, service: open.service, clientId: clientId, clientName: clientName, isRemote: !isLocal)
            // A backend that never answers `open` gets the response timeout, as a request does.
            let timeout = core.configuration.responseTimeout
            let timer = link.eventLoop.scheduleTask(in: .init(timeout)) {
                link.run { connection in
                    guard connection.machine.openEnded(open.channel, handle: handle) else { return }
                    connection.core.breaches.record(
                        "open timeout \(backend.package)",
                        "package \(backend.package) did not answer open within \(describe(timeout)); refused as Unknown",
                        metadata: ["package": "\(backend.package)"])
                    connection.write(
                        .opened(
                            OpenedFrame(
                                channel: open.channel, status: .unknown,
                                error:
                                    "the service did not answer open within \(describe(timeout)) (the host's response timeout)"
                            )))
                    connection.closeIfDrained()
                }
            }
            machine.openStarted(open.channel, handle: handle, timeout: timer)
            backend.open(info) { status in
                link.run { connection in
                    connection.opened(
                        open, handle: handle, backend: backend, interface: route.interface, status: status)
                }
            }
        }
    }

    /// The backend answered an `open`.
    private func opened(
        _ open: OpenFrame, handle: UInt64, backend: any ServiceBackend, interface: ServiceInterface?,
        status: AppServiceConnectionStatus
    ) {
        guard machine.openEnded(open.channel, handle: handle) else {
            // Answered after the host gave up on it (the client was told Unknown), or after
            // the connection closed.
            if status == .success { backend.closed(channel: handle, status: .canceled, by: .host) }
            return
        }
        guard !isClosed, let link else {
            if status == .success { backend.closed(channel: handle, status: .canceled, by: .network) }
            return
        }
        var status = status
        var error: String?
        if status == .success {
            // Recorded only if the backend is still its package's: a reload that retired it
            // closes its channels on this loop after it swapped the packages.
            if core.isCurrent(backend) {
                link.slot.book.withLock {
                    $0.insertChannel(
                        handle,
                        ConnectionSlot.Channel(
                            number: open.channel, backend: backend,
                            metricsIndex: metricsIndex(package: backend.package, service: open.service),
                            interface: interface))
                }
                logger.debug("opened \(open.package)/\(untrusted(open.service, limit: 80)) as channel \(open.channel)")
            } else {
                // The package was reloaded while it answered: that version is gone (if it is
                // still winding down, it hears the channel is closed).
                status = .appUnavailable
                error = "package \"\(backend.package)\" was reloaded while it opened the channel: open again"
                backend.closed(channel: handle, status: .canceled, by: .host)
            }
        } else if backend.health.state == .failed {
            // The host's side failed (a worker that cannot start its plugin), not the service.
            error = core.unavailable(backend.package, backend.health.reason ?? "its plugin failed")
                .told(isRemote: !isLocal)
        } else {
            error = "the service refused the connection (its open answered \(status))"
        }
        if status != .success {
            core.breaches.record(
                "open refused by service", level: .info,
                "open \(open.package)/\(untrusted(open.service, limit: 80)) refused by the service",
                metadata: ["status": "\(status)"], isBreach: false)
        }
        audit(
            "open",
            ["package": open.package, "service": untrusted(open.service, limit: 80), "status": "\(status)"])
        write(.opened(OpenedFrame(channel: open.channel, status: status, error: error)))
        closeIfDrained()
    }

    private func handleRequest(_ request: RequestFrame) {
        func reply(_ status: AppServiceResponseStatus, _ reason: String) {
            write(.response(ResponseFrame(channel: request.channel, id: request.id, status: status, error: reason)))
        }
        guard let link else { return }
        core.totals.requests.wrappingAdd(1, ordering: .relaxed)
        if core.isShuttingDown {
            reply(.remoteSystemUnavailable, "the host is shutting down")
            return
        }
        let bytes = request.message.byteCount
        switch machine.requestReceived(bytes: bytes) {
        case .proceed:
            break
        case .tooManyInFlight:
            core.breaches.record("requests in flight", level: .notice, "a connection reached --max-in-flight")
            reply(.resourceLimitsExceeded, "more than \(limits.maxInFlight) requests in flight on this connection")
            return
        case .tooManyBytes:
            core.breaches.record("bytes in flight", level: .notice, "a connection reached --max-in-flight-bytes")
            reply(
                .resourceLimitsExceeded,
                "more than \(admission.maxInFlightBytes) bytes of requests in flight on this connection")
            return
        }
        if let refusal = core.checkMessage(request.message) {
            machine.requestEnded(bytes: bytes)
            reply(refusal.status, refusal.reason)
            return
        }
        // Recorded under the connection's lock, with the check that the channel is open and
        // not closing: a channel closes on this loop, so no request reaches a backend after
        // its `closed`.
        enum Routed {
            case delivered(UInt64, UInt64, any ServiceBackend)
            case notOpen
            case closing
            /// The service declares its commands: the request is checked against them first.
            case check(ServiceInterface)
        }
        // The response timeout counts from the frame's arrival.
        let deadline = core.answerDeadline(from: lastFrame)
        var arrived = NIODeadline.uptimeNanoseconds(0)
        if loopMetrics != nil {
            arrived = burstArrived ?? .now()
            burstArrived = arrived
        }
        func route(checked: Bool) -> Routed {
            link.slot.book.withLock { book -> Routed in
                guard let handle = book.numbers[request.channel], let channel = book.channels[handle] else {
                    return .notOpen
                }
                guard !channel.closing else { return .closing }
                // Checked outside the lock (it decodes the message), then routed again.
                if !checked, let interface = channel.interface { return .check(interface) }
                let id = book.makeId()
                book.pending[id] = ConnectionSlot.PendingRequest(
                    number: request.channel, clientRequest: request.id, channel: handle, backend: channel.backend,
                    messageBytes: bytes, deadline: deadline, metricsIndex: channel.metricsIndex,
                    received: channel.metricsIndex == nil ? .uptimeNanoseconds(0) : arrived)
                return .delivered(id, handle, channel.backend)
            }
        }
        var routed = route(checked: false)
        if case .check(let interface) = routed {
            // The message was found a valid ValueSet above; its outline is what the check
            // reads (keys, kinds, the command), without decoding what it nests.
            let message = (try? request.message.outline()) ?? ValueSet()
            if let refusal = interface.refusal(of: message) {
                machine.requestEnded(bytes: bytes)
                core.breaches.record(
                    "request refused by its service's commands", level: .info,
                    "a request on channel \(request.channel) refused: \(refusal)")
                reply(.failure, refusal)
                return
            }
            routed = route(checked: true)
        }
        switch routed {
        case .check:
            // Not returned for a checked request; answered rather than trapped on all the same.
            machine.requestEnded(bytes: bytes)
            reply(.unknown, "the request could not be routed")
        case .notOpen:
            machine.requestEnded(bytes: bytes)
            reply(.failure, "channel \(request.channel) is not open")
        case .closing:
            machine.requestEnded(bytes: bytes)
            reply(.failure, "channel \(request.channel) is closing")
        case .delivered(let id, let handle, let backend):
            backend.request(id, on: handle, message: request.message.buffer)
            expectAnswers(by: deadline)
        }
    }

    /// Where requests to `service` of `package` are counted on this loop, with `--metrics`.
    private func metricsIndex(package: String, service: String) -> Int? {
        guard let metrics = core.metrics, let loopMetrics else { return nil }
        // The manifest's spelling of the service: the client's may differ (Unicode
        // equivalence), and is not the client's to choose.
        let declared = core.package(package)?.manifest.service(named: service)?.name ?? service
        return loopMetrics.index(of: metrics.service(package: package, service: declared))
    }

    /// Sends the answer to a client request (from the backend, a timeout, or the host).
    func finish(
        _ request: ConnectionSlot.PendingRequest, status: AppServiceResponseStatus, message: ByteBuffer?,
        error: String?
    ) {
        machine.requestEnded(bytes: request.messageBytes)
        if let index = request.metricsIndex { loopMetrics?.answered(index, status: status, since: request.received) }
        defer { closeIfDrained() }
        let body = message.map { EncodedValueSet(uncheckedBytes: $0) } ?? .empty
        write(
            .response(
                ResponseFrame(
                    channel: request.number, id: request.clientRequest, status: status, message: body,
                    error: error
                )
            )
        )
    }

    /// A backend's own message to the client, sent unless its channel closed meanwhile (the
    /// backend was then answered as the channel closed).
    func sendServiceRequest(_ id: UInt64, number: UInt64, message: ByteBuffer) {
        guard let slot = link?.slot, let deadline = slot.book.withLock({ $0.outgoing[id]?.deadline }) else { return }
        guard !machine.inputClosed else {
            // The client half-closed: it can answer nothing more (see answerOutgoingAfterInputClosed).
            answerOutgoingAfterInputClosed()
            return
        }
        write(.request(RequestFrame(channel: number, id: id, message: EncodedValueSet(uncheckedBytes: message))))
        expectAnswers(by: deadline)
    }

    private func handleClose(_ number: UInt64) {
        guard let slot = link?.slot, let handle = slot.book.withLock({ $0.numbers[number] }) else {
            logger.debug("close of channel \(number), which is not open; ignored")
            return
        }
        closeChannel(
            handle, status: .completed, by: .client, requestStatus: .failure, reason: "the channel was closed",
            tellClient: false)
    }

    /// Closes channel `handle` of this connection, if it is still open: what waits on it is
    /// answered (the client's requests with `requestStatus` and `reason`), the client is told
    /// with `status` (unless it closed the channel itself), and the backend with `closer`
    /// (unless it failed: then it hears nothing).
    func closeChannel(
        _ handle: UInt64, status: AppServiceClosedStatus, by closer: ChannelCloser,
        requestStatus: AppServiceResponseStatus, reason: String, outgoingStatus: AppServiceResponseStatus = .failure,
        tellClient: Bool = true, tellBackend: Bool = true
    ) {
        guard let slot = link?.slot, let closed = slot.book.withLock({ $0.removeChannel(handle) }) else { return }
        core.settle(closed, on: self, requestStatus: requestStatus, reason: reason, outgoingStatus: outgoingStatus)
        if tellClient { write(.closed(ClosedFrame(channel: closed.channel.number, status: status))) }
        if tellBackend { closed.channel.backend.closed(channel: handle, status: status, by: closer) }
    }

    /// Closes every channel of `backend` on this connection (a reload retired it, or it failed).
    func closeChannels(
        of backend: any ServiceBackend, status: AppServiceClosedStatus, requestStatus: AppServiceResponseStatus,
        reason: String
    ) {
        guard let slot = link?.slot else { return }
        let handles = slot.book.withLock { book in book.channels.filter { $0.value.backend === backend }.map(\.key) }
        for handle in handles {
            closeChannel(
                handle, status: status, by: .host, requestStatus: requestStatus, reason: reason,
                tellBackend: status == .canceled)
        }
    }

    /// The host is shutting down: requests still waiting are answered with status 4, and
    /// every channel closes as canceled.
    func hostIsStopping() {
        guard let slot = link?.slot else { return }
        let waiting = slot.book.withLock { book in
            let waiting = book.pending
            book.pending.removeAll()
            return waiting
        }
        for (_, request) in waiting {
            finish(
                request, status: .remoteSystemUnavailable, message: nil,
                error: "the host shut down before the service answered")
        }
        for handle in slot.book.withLock({ Array($0.channels.keys) }) {
            closeChannel(
                handle, status: .canceled, by: .host, requestStatus: .failure, reason: "the host is shutting down",
                outgoingStatus: .remoteSystemUnavailable)
        }
    }

    private func handleLaunch(_ launch: LaunchFrame) {
        core.totals.launches.wrappingAdd(1, ordering: .relaxed)
        let answer = { (outcome: LaunchOutcome) in
            self.auditLaunch(launch, outcome)
            self.write(
                .launched(
                    LaunchedFrame(
                        id: launch.id, status: outcome.status, error: outcome.error.map { untrusted($0, limit: 400) })))
        }
        // Refused before it reaches a handler (HostCore.launch counts the others).
        let refuse = { (outcome: LaunchOutcome) in
            self.core.metrics?.launched(scheme: self.core.declaredScheme(of: launch.uri), status: outcome.status)
            answer(outcome)
        }
        guard machine.launchReceived() else {
            core.breaches.record(
                "launches per connection", level: .notice, "a connection reached --max-launches-per-connection")
            refuse(
                LaunchOutcome(
                    status: .deniedByRemoteSystem,
                    error: "more than \(admission.maxLaunchesPerConnection) launches in flight on this connection"))
            return
        }
        guard core.takeLaunchSlot() else {
            machine.launchEnded()
            core.breaches.record("launches", "the host reached --max-launches")
            refuse(
                LaunchOutcome(
                    status: .deniedByRemoteSystem,
                    error: "the host has \(admission.maxLaunches) launches in flight, its limit"))
            return
        }
        if let data = launch.data, data.byteCount > core.configuration.launchDataLimit {
            machine.launchEnded()
            core.releaseLaunchSlot()
            refuse(
                LaunchOutcome(
                    status: .valueSetTooLarge,
                    error:
                        "the launch data is \(data.byteCount) bytes, over the limit of \(core.configuration.launchDataLimit)"
                ))
            return
        }
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
                connection.machine.launchEnded()
                connection.auditLaunch(launch, outcome)
                connection.write(
                    .launched(
                        LaunchedFrame(
                            id: launch.id, status: outcome.status,
                            error: outcome.error.map { untrusted($0, limit: 400) })))
                connection.closeIfDrained()
            }
        }
    }

    /// A launch's outcome for the audit log: its scheme and target, not the whole URI (which
    /// may carry what its sender would not want kept).
    func auditLaunch(_ launch: LaunchFrame, _ outcome: LaunchOutcome) {
        guard core.audit != nil else { return }
        let scheme = launch.uri.split(separator: ":", maxSplits: 1).first.map(String.init) ?? ""
        var fields = ["scheme": untrusted(scheme, limit: 64), "status": "\(outcome.status)"]
        if let package = launch.package { fields["package"] = untrusted(package, limit: 80) }
        audit("launch", fields)
    }

    // MARK: - Writing

    /// Writes `frame`, and flushes it: at the end of the read when it answers what the client
    /// sent (``channelReadComplete(context:)``), once the frames of the read are handled when it
    /// is an answer a worker's link brought (``FlushesAfterRead``), else at once.
    func write(_ frame: HostFrame) {
        guard !isClosed, let context else { return }
        let bytes = encoded(frame, context: context)
        unflushedBytes &+= bytes.readableBytes
        context.write(wrapOutboundOut(bytes), promise: nil)
        guard !flushPending else { return }
        if inReadBurst || FlushesAfterRead.flushLater(self) {
            flushPending = true
        } else {
            unflushedBytes = 0
            context.flush()
        }
    }

    /// How many bytes ``write(_:)`` wrote since the last flush (counted while frames of a
    /// read are acted on: ``mayTakeNextFrame(_:)``).
    private var unflushedBytes = 0

    /// Flushes what ``write(_:)`` left unflushed, if anything.
    func flushIfPending() {
        guard flushPending else { return }
        flushPending = false
        unflushedBytes = 0
        context?.flush()
    }

    /// `frame` with its length prefix, counted with `--metrics`.
    private func encoded(_ frame: HostFrame, context: ChannelHandlerContext) -> ByteBuffer {
        var bytes = context.channel.allocator.buffer(for: frame)
        bytes.writeFrame(frame, countedIn: loopMetrics)
        return bytes
    }

    /// Answers a protocol error with an `error` frame, then closes the connection (all but
    /// `unknownType`, which is not sent through here). The message is cut and escaped: it may
    /// carry what the client sent.
    private func protocolError(_ error: FrameError, log: Bool = true) {
        let error = FrameError(error.code, untrusted(error.message, limit: 300))
        if log { core.breaches.record("protocol error", level: .notice, "protocol error: \(error)") }
        // Nothing the client sends from here is read, or held.
        stopReading()
        guard !isClosed, let context else { return }
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(encoded(.error(ErrorFrame(error)), context: context))).whenComplete { _ in
            channel.close(promise: nil)
        }
        // A client that does not read would keep the write, and so the connection, pending
        // for ever: it gets a moment to read the error, then the connection closes anyway.
        channel.eventLoop.scheduleTask(in: Self.errorGrace) { channel.close(promise: nil) }
        machine.close()
    }

    /// How long a client has to read an `error` frame before its connection is closed.
    static let errorGrace = TimeAmount.seconds(2)

    func close(promise: EventLoopPromise<Void>?) {
        guard let context else {
            promise?.succeed()
            return
        }
        // What was written in this turn goes out first (a closing channel fails what it holds
        // unflushed).
        flushIfPending()
        context.close().whenComplete { _ in promise?.succeed() }
    }
}

extension ConnectionHandler: FlushedLater {}
