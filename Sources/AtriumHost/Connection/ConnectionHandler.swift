import AtriumProtocol
import AtriumTLS
import AtriumValues
import Dispatch
import Logging
import NIOCore
import Synchronization

/// One client connection's I/O: it reads bytes and cuts them into frames (``FrameInput``),
/// drives the connection's ``ConnectionStateMachine``, hands each frame to the part of the
/// connection that owns its family, and writes what it is given, with backpressure both ways.
///
/// | frames | family |
/// |---|---|
/// | `hello`, `ping`; what a client that is not authorized may not send | ``ConnectionSession`` |
/// | `pair`, `pairReveal` | ``ConnectionPairing`` |
/// | `admin` | ``ConnectionAdmin`` |
/// | `open`, `request`, `response`, `close`, `apps` | ``ConnectionChannels`` |
/// | `launch` | ``ConnectionLaunches`` |
/// | `attach`, `chunk`, `ack`, `detach`, `cancelTransfer`, `transfers` | ``ConnectionTransfers`` |
///
/// Everything here runs on the connection's event loop; backends are called only through
/// ``ServiceBackend`` (which never blocks the loop), and from this loop only, in the order
/// things happened: a backend never gets a request on a channel after its `closed`. They
/// reach back through ``HostCore`` and the connection's ``ConnectionSlot``.
///
/// It reads and writes bytes: it cuts what it reads into frames itself and encodes what it
/// writes, so that no frame value is boxed into the pipeline and cast back.
final class ConnectionHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let core: HostCore
    /// Whether the client came through the local Unix socket (else it is remote, over TCP).
    let isLocal: Bool
    /// Whether TLS carries the connection, and the client's identity then.
    let transport: ConnectionTransport
    let id: UInt64
    /// A local client's user, from the kernel (SO_PEERCRED), once the connection is up.
    private(set) var localUser: UInt32?
    var logger: Logger
    private var context: ChannelHandlerContext?
    private(set) var link: ConnectionLink?

    /// The families of frames, each with its own state (see the table above).
    let session: ConnectionSession
    let pairing = ConnectionPairing()
    let channels = ConnectionChannels()
    let transfers = ConnectionTransfers()

    /// Whether the connection may stay, decided as it was accepted (``AdmissionGate``).
    private let ticket: AdmissionTicket
    /// The connection's phase, and what it owes the client (opens, requests and launches in
    /// flight): what decides when a half-closed connection closes.
    var machine: ConnectionStateMachine
    /// Set once the pipeline is gone: nothing is written any more.
    private(set) var isRemoved = false
    var isClosed: Bool { machine.isClosed || isRemoved }
    /// When the last whole frame arrived (the idle timeout and the response timeout count
    /// from it).
    private(set) var lastFrame = NIODeadline.now()
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
        session = ConnectionSession(isLocal: isLocal, core: core)
        input = FrameInput(
            maxFrameBytes: core.limits.maxFrameBytes, maxFirstFrameBytes: core.admission.maxHelloBytes,
            lowered: session.frameLimit)
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
    /// What has been read of frames not yet whole; the first frame (hello) under its own limit.
    private var input: FrameInput<ClientFrame>
    /// Whether reading has stopped (a protocol error, the connection gone): nothing the client
    /// sends after is read.
    private var inputBroken = false
    /// Whether `channelRead` is handing on the frames of a read (and so modifying `input`).
    private var reading = false
    /// What `--metrics` records on this connection's loop.
    let loopMetrics: LoopMetrics?
    /// With `--metrics`: when the frames of this read arrived (read once for all of them: a
    /// read's requests arrived together).
    private var burstArrived: NIODeadline?

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if case .success(let slot) = ticket.admission {
            link = ConnectionLink(
                id: id, handler: NIOLoopBound(self, eventLoop: context.eventLoop), slot: slot, output: output)
        }
        // Read once (each read is a system call): the log, the audit lines and the pairing
        // limits all name the address the connection came from, also after it is gone.
        guard let remote = context.remoteAddress else { return }
        logger[metadataKey: "peer"] = "\(remote)"
        if !isLocal { session.connected(remote: remote) }
    }

    /// The handler holds its own link (which holds the handler) and its context (which holds
    /// the channel, its pipeline and buffers): both are let go here, or every connection would
    /// stay in memory for good after it closed. Whoever still has a copy of the link (a
    /// request or launch in flight) keeps the handler only until it is done with it.
    func handlerRemoved(context: ChannelHandlerContext) {
        isRemoved = true
        stopReading()
        session.ended()
        channels.stopTimer()
        link = nil
        self.context = nil
    }

    /// The client asked for HTTP (ALPN `http/1.1`): this is not a connection of frames. The
    /// host forgets it as one (its place under the connection limits stays taken until it
    /// closes), and this handler leaves the pipeline to the HTTP handlers.
    func leaveForHTTP(_ pipeline: ChannelPipeline.SynchronousOperations) {
        if admitted {
            core.connectionClosed(id)
            admitted = false
        }
        logger.debug("speaks HTTP")
        pipeline.removeHandler(self, promise: nil)
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
        let credentials = isLocal ? LocalPeer.credentials(of: context.channel) : nil
        localUser = credentials?.uid
        if isLocal, let refusal = core.localPeer.refusal(of: credentials) {
            session.audit("local.refused", ["reason": refusal], on: self)
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
        session.admitted(on: self)
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
        pairing.ended(core: core)
        let requests = machine.inFlight
        // Opens still unanswered keep their attempts: a late success is then told it closed.
        machine.connectionEnded()
        session.ended()
        var closed = 0
        if admitted, let slot = link?.slot {
            core.connectionClosed(id)
            closed = channels.connectionEnded(slot: slot, core: core)
            transfers.connectionEnded(core: core, connection: id)
        }
        logger.debug("disconnected", metadata: ["channels closed": "\(closed)", "requests dropped": "\(requests)"])
        context.fireChannelInactive()
    }

    // MARK: - Timers

    /// Runs `body` with this handler at `delay` from now, on its loop (nil once the pipeline
    /// is gone). The task holds the handler until it runs or is cancelled.
    func schedule(in delay: TimeAmount, _ body: @escaping (ConnectionHandler) -> Void) -> Scheduled<Void>? {
        guard !isRemoved, let context else { return nil }
        return context.eventLoop.assumeIsolated().scheduleTask(in: delay) { [self] in
            guard !isRemoved else { return }
            body(self)
        }
    }

    /// Runs `body` with this handler at `deadline`, on its loop (see ``schedule(in:_:)``).
    func schedule(at deadline: NIODeadline, _ body: @escaping (ConnectionHandler) -> Void) -> Scheduled<Void>? {
        guard !isRemoved, let context else { return nil }
        return context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            guard !isRemoved else { return }
            body(self)
        }
    }

    /// Where this host answers HTTPS: the address this connection reached, when its listener
    /// serves TLS; else the TLS listener's (a local client's); nil when the host serves no TLS.
    var httpsAddress: SocketAddress? {
        if transport.listenerServesTLS, let local = context?.channel.localAddress { return local }
        return core.httpsAddress.withLock { $0 }
    }

    /// The allocator of the connection's buffers.
    var allocator: ByteBufferAllocator { context?.channel.allocator ?? ByteBufferAllocator() }

    /// The connection's event loop, while its pipeline is there.
    var eventLoop: (any EventLoop)? { context?.eventLoop }

    /// The connection's pipeline, while it is there (``ConnectionSession`` reads the TLS
    /// identity from it).
    var pipeline: ChannelPipeline.SynchronousOperations? { context?.pipeline.syncOperations }

    /// Who this client is, as a service's access sees it.
    var caller: Router.Caller { session.caller(isLocal: isLocal, identity: transport.peerIdentity) }

    // MARK: - Half-close and backpressure

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event {
            // An answer that waits for the journal is owed too: the end is acted on after it.
            if framesWaiting || answerWaitsForJournal {
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
        channels.answerOutgoingAfterInputClosed(on: self)
        closeIfDrained()
    }

    /// After a half-close, closes the connection once nothing is left to answer.
    func closeIfDrained() {
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
        if context.channel.isWritable && !framesWaiting && !answerWaitsForJournal {
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
        return (context.channel.isWritable && !answerWaitsForJournal) || isClosed || inputBroken
    }

    /// An answer to this client waits for the transfers' journal (an outcome it is told, a
    /// `transfers` list with one: ``ConnectionTransfers``): its next frames wait unread until
    /// it has gone, so that a client asking again and again has one answer at a time held
    /// behind the journal, and gets its answers in the order it asked.
    private(set) var answerWaitsForJournal = false

    /// Holds the client's next frames until ``answerWent()``.
    func answerWaits() {
        answerWaitsForJournal = true
    }

    /// The answer that waited for the journal has been written: the client's frames go on, and
    /// then the end of its input, if it came meanwhile.
    func answerWent() {
        guard answerWaitsForJournal else { return }
        answerWaitsForJournal = false
        guard let context, !isRemoved, !reading else { return }
        if framesWaiting {
            if context.channel.isWritable { resumeFrames(context: context) }
        } else if inputClosedWhilePaused {
            inputClosedWhilePaused = false
            inputClosed()
        } else if readHeld, context.channel.isWritable {
            readHeld = false
            context.read()
        }
    }

    /// Whether frames of the last read wait for the output to drain (`input.isPaused`, kept
    /// apart because a flush can call back into this handler while `input` is being modified).
    private var framesWaiting = false

    /// Acts on the frames of a read that waited for the output to drain, then reads again.
    private func resumeFrames(context: ChannelHandlerContext) {
        guard framesWaiting, !reading, !isRemoved, !inputBroken, !answerWaitsForJournal else { return }
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
        // The last frame acted on may have an answer waiting for the journal: the end of the
        // input, and the next read, wait for it (``answerWent()``).
        guard !framesWaiting, !answerWaitsForJournal else { return }
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
            // While an answer waits for the journal, its going resumes the frames.
            if framesWaiting, !answerWaitsForJournal {
                resumeFrames(context: context)
            } else if readHeld, !answerWaitsForJournal {
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
        // A read that comes while frames wait (one socket wakeup brings several reads) only
        // joins them: nothing is acted on before they are.
        if framesWaiting || answerWaitsForJournal {
            input.hold(unwrapInboundIn(data))
            return
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
        if session.refused(frame, on: self) { return }
        switch frame {
        case .hello(let hello): session.hello(hello, on: self)
        case .ping(let id): session.ping(id: id, on: self)
        case .pair(let pair): pairing.pair(pair, on: self)
        case .pairReveal(let id, let nonce): pairing.reveal(id: id, nonce: nonce, on: self)
        case .admin(let admin): ConnectionAdmin.admin(admin, on: self)
        case .open(let open): channels.open(open, on: self)
        case .request(let request): channels.request(request, on: self)
        case .response(let response): channels.response(response, on: self)
        case .close(let channel): channels.close(channel, on: self)
        case .apps(let id, let package): channels.apps(id: id, package: package, on: self)
        case .launch(let launch): ConnectionLaunches.launch(launch, on: self)
        case .transfer(let frame): transfers.frame(frame, on: self)
        case .unknown(let type):
            let message = "unknown frame type \"\(untrusted(type, limit: 64))\""
            core.breaches.record("unknown frame type", level: .info, message)
            write(.error(ErrorFrame(code: .unknownType, message: message)))
        }
    }

    /// With `--metrics`: when the frames of the read under way arrived (taken once for all of
    /// them: a read's requests arrived together); zero without.
    func readArrived() -> NIODeadline {
        guard loopMetrics != nil else { return .uptimeNanoseconds(0) }
        let arrived = burstArrived ?? .now()
        burstArrived = arrived
        return arrived
    }

    // MARK: - Writing

    /// Writes `frame`, and flushes it: at the end of the read when it answers what the client
    /// sent (``channelReadComplete(context:)``), once the frames of the read are handled when it
    /// is an answer a worker's link brought (``FlushesAfterRead``), else at once.
    /// `promise`, if any, is completed once the frame went to the socket (or could not).
    func write(_ frame: HostFrame, promise: EventLoopPromise<Void>? = nil) {
        guard !isClosed, let context else {
            promise?.succeed()
            return
        }
        let bytes = encoded(frame, context: context)
        unflushedBytes &+= bytes.readableBytes
        context.write(wrapOutboundOut(bytes), promise: promise)
        flushAfterWrite(context)
    }

    /// Flushes what was just written: at the end of the read when it answers what the client
    /// sent, once the frames of the read are handled when a worker's link brought it, else at once.
    private func flushAfterWrite(_ context: ChannelHandlerContext) {
        guard !flushPending else { return }
        if inReadBurst || FlushesAfterRead.flushLater(self) {
            flushPending = true
        } else {
            unflushedBytes = 0
            context.flush()
        }
    }

    /// Writes a download's chunk and flushes it: the frame's head, the data as it was read
    /// (never copied into a frame buffer), and its tail. `promise` completes once it went to the
    /// socket.
    func writeChunk(_ chunk: ChunkFrame, promise: EventLoopPromise<Void>?) {
        guard !isClosed, let context else {
            promise?.succeed()
            return
        }
        let (head, data, tail) = chunk.framedParts(allocator: context.channel.allocator)
        loopMetrics?.bytesOut += head.readableBytes + data.readableBytes + tail.readableBytes
        context.write(wrapOutboundOut(head), promise: nil)
        if tail.readableBytes > 0 {
            context.write(wrapOutboundOut(data), promise: nil)
            context.write(wrapOutboundOut(tail), promise: promise)
        } else {
            context.write(wrapOutboundOut(data), promise: promise)
        }
        flushAfterWrite(context)
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
    func protocolError(_ error: FrameError, log: Bool = true) {
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
