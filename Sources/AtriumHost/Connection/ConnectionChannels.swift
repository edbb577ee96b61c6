import AtriumProtocol
import AtriumValues
import Logging
import NIOCore

/// A connection's app service connections (CONTRACT section 4): `open` routed to the backend
/// of the package that declared the service, `request`s checked and delivered to it, its
/// answers and its own messages carried back, `close` both ways, `apps`, and the response
/// timeout of everything that waits for an answer.
///
/// The channels and requests themselves are in the connection's ``ConnectionSlot``, which
/// backends reach from their threads; what is here is the connection's side of them: the one
/// timer that answers what is overdue. What is owed to the client (opens, requests in flight)
/// is counted in the connection's ``ConnectionStateMachine``.
///
/// On the connection's event loop only; it writes through the handler it is given.
final class ConnectionChannels {
    /// The connection's one response timer, and when it fires (``expectAnswers(by:on:)``).
    private var answerTimer: Scheduled<Void>?
    private var answerTimerDeadline: NIODeadline?

    // MARK: - open

    func open(_ open: OpenFrame, on connection: ConnectionHandler) {
        guard let link = connection.link else { return }
        let core = connection.core
        let isLocal = connection.isLocal
        let (isOpen, openChannels) = link.slot.book.withLock { ($0.numbers[open.channel] != nil, $0.channels.count) }
        // The reason goes to the log and, as the `opened` frame's error, to the client (a remote
        // one is told less about the host's files).
        let refuse = { (refusal: Router.Refusal) in
            let (status, reason) = (refusal.status, refusal.reason)
            var metadata: Logger.Metadata = ["status": "\(status)"]
            if !isLocal {
                metadata["device"] = "\(connection.transport.peerIdentity ?? "none (plain TCP)")"
                metadata["address"] = "\(connection.session.peerAddress)"
            }
            connection.session.audit(
                "open",
                [
                    "package": untrusted(open.package, limit: 80), "service": untrusted(open.service, limit: 80),
                    "status": "\(status)", "reason": untrusted(reason),
                ], on: connection)
            // No such package or service, or one that is down, is an ordinary outcome; access,
            // policy and limits are breaches.
            let ordinary: [AppServiceConnectionStatus] = [.appNotInstalled, .appServiceUnavailable, .appUnavailable]
            core.breaches.record(
                status == .notAuthorized ? "open not authorized" : "open refused", level: .info,
                "open \(untrusted(open.package, limit: 80))/\(untrusted(open.service, limit: 80)) refused: \(untrusted(reason))",
                metadata: metadata, isBreach: !ordinary.contains(status))
            let told = refusal.told(isRemote: !isLocal)
            connection.write(
                .opened(OpenedFrame(channel: open.channel, status: status, error: untrusted(told, limit: 400))))
            connection.session.countRefusedFrame(on: connection)
        }
        switch connection.machine.openReceived(open.channel, isOpen: isOpen, openChannels: openChannels) {
        case .numberInUse:
            connection.write(
                .error(ErrorFrame(code: "channelInUse", message: "channel \(open.channel) is already open")))
            return
        case .tooManyChannels:
            refuse(
                Router.Refusal(
                    .unknown, "the connection already has \(connection.limits.maxChannels) channels, the limit"))
            return
        case .proceed:
            break
        }
        if core.isShuttingDown {
            refuse(Router.Refusal(.remoteSystemUnavailable, "the host is shutting down"))
            return
        }
        switch core.router.route(package: open.package, service: open.service, caller: connection.caller) {
        case .failure(let refusal):
            refuse(refusal)
        case .success(let route):
            let backend = route.backend
            let handle = link.slot.book.withLock { $0.makeId() }
            let session = connection.session
            let info = ChannelInfo(
                id: handle, service: open.service, clientId: session.clientId, clientName: session.clientName,
                isRemote: !isLocal)
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
            connection.machine.openStarted(open.channel, handle: handle, timeout: timer)
            backend.open(info) { status in
                link.run { connection in
                    connection.channels.opened(
                        open, handle: handle, backend: backend, interface: route.interface, status: status,
                        on: connection)
                }
            }
        }
    }

    /// The backend answered an `open`.
    private func opened(
        _ open: OpenFrame, handle: UInt64, backend: any ServiceBackend, interface: ServiceInterface?,
        status: AppServiceConnectionStatus, on connection: ConnectionHandler
    ) {
        guard connection.machine.openEnded(open.channel, handle: handle) else {
            // Answered after the host gave up on it (the client was told Unknown), or after
            // the connection closed.
            if status == .success { backend.closed(channel: handle, status: .canceled, by: .host) }
            return
        }
        guard !connection.isClosed, let link = connection.link else {
            if status == .success { backend.closed(channel: handle, status: .canceled, by: .network) }
            return
        }
        let core = connection.core
        var status = status
        var error: String?
        if status == .success {
            // Recorded only if the backend is still its package's: a reload that retired it
            // closes its channels on this loop after it swapped the packages.
            if core.registry.isCurrent(backend) {
                let metricsIndex = metricsIndex(package: backend.package, service: open.service, on: connection)
                link.slot.book.withLock {
                    $0.insertChannel(
                        handle,
                        ConnectionSlot.Channel(
                            number: open.channel, backend: backend, service: open.service, metricsIndex: metricsIndex,
                            interface: interface))
                }
                connection.logger.debug(
                    "opened \(open.package)/\(untrusted(open.service, limit: 80)) as channel \(open.channel)")
            } else {
                // The package was reloaded while it answered: that version is gone (if it is
                // still winding down, it hears the channel is closed).
                status = .appUnavailable
                error = "package \"\(backend.package)\" was reloaded while it opened the channel: open again"
                backend.closed(channel: handle, status: .canceled, by: .host)
            }
        } else if backend.health.state == .failed {
            // The host's side failed (a worker that cannot start its plugin), not the service.
            error = Router.unavailable(backend.package, backend.health.reason ?? "its plugin failed")
                .told(isRemote: !connection.isLocal)
        } else {
            error = "the service refused the connection (its open answered \(status))"
        }
        if status != .success {
            core.breaches.record(
                "open refused by service", level: .info,
                "open \(open.package)/\(untrusted(open.service, limit: 80)) refused by the service",
                metadata: ["status": "\(status)"], isBreach: false)
        }
        connection.session.audit(
            "open",
            ["package": open.package, "service": untrusted(open.service, limit: 80), "status": "\(status)"],
            on: connection)
        connection.write(.opened(OpenedFrame(channel: open.channel, status: status, error: error)))
        connection.closeIfDrained()
    }

    /// Where requests to `service` of `package` are counted on this loop, with `--metrics`.
    private func metricsIndex(package: String, service: String, on connection: ConnectionHandler) -> Int? {
        let core = connection.core
        guard let metrics = core.metrics, let loopMetrics = connection.loopMetrics else { return nil }
        // The manifest's spelling of the service: the client's may differ (Unicode
        // equivalence), and is not the client's to choose.
        let declared = core.registry.package(package)?.manifest.service(named: service)?.name ?? service
        return loopMetrics.index(of: metrics.service(package: package, service: declared))
    }

    // MARK: - apps

    func apps(id: UInt64, package: String?, on connection: ConnectionHandler) {
        connection.write(
            .apps(AppsFrame(id: id, apps: connection.core.router.apps(for: connection.caller, package: package))))
    }

    // MARK: - Requests

    func request(_ request: RequestFrame, on connection: ConnectionHandler) {
        func reply(_ status: AppServiceResponseStatus, _ reason: String) {
            connection.write(
                .response(ResponseFrame(channel: request.channel, id: request.id, status: status, error: reason)))
        }
        guard let link = connection.link else { return }
        let core = connection.core
        core.totals.requests.wrappingAdd(1, ordering: .relaxed)
        if core.isShuttingDown {
            reply(.remoteSystemUnavailable, "the host is shutting down")
            return
        }
        let bytes = request.message.byteCount
        switch connection.machine.requestReceived(bytes: bytes) {
        case .proceed:
            break
        case .tooManyInFlight:
            core.breaches.record("requests in flight", level: .notice, "a connection reached --max-in-flight")
            reply(
                .resourceLimitsExceeded,
                "more than \(connection.limits.maxInFlight) requests in flight on this connection")
            return
        case .tooManyBytes:
            core.breaches.record("bytes in flight", level: .notice, "a connection reached --max-in-flight-bytes")
            reply(
                .resourceLimitsExceeded,
                "more than \(connection.admission.maxInFlightBytes) bytes of requests in flight on this connection")
            return
        }
        if let refusal = core.checkMessage(request.message) {
            connection.machine.requestEnded(bytes: bytes)
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
        let deadline = core.answerDeadline(from: connection.lastFrame)
        let arrived = connection.readArrived()
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
                    received: channel.metricsIndex == nil ? .uptimeNanoseconds(0) : arrived, attach: request.attach)
                return .delivered(id, handle, channel.backend)
            }
        }
        var routed = route(checked: false)
        if case .check(let interface) = routed {
            // The message was found a valid ValueSet above; its outline is what the check
            // reads (keys, kinds, the command), without decoding what it nests.
            let message = (try? request.message.outline()) ?? ValueSet()
            if let refusal = interface.refusal(of: message) {
                connection.machine.requestEnded(bytes: bytes)
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
            connection.machine.requestEnded(bytes: bytes)
            reply(.unknown, "the request could not be routed")
        case .notOpen:
            connection.machine.requestEnded(bytes: bytes)
            reply(.failure, "channel \(request.channel) is not open")
        case .closing:
            connection.machine.requestEnded(bytes: bytes)
            reply(.failure, "channel \(request.channel) is closing")
        case .delivered(let id, let handle, let backend):
            backend.request(id, on: handle, message: request.message.buffer)
            expectAnswers(by: deadline, on: connection)
        }
    }

    /// Sends the answer to a client request (from the backend, a timeout, or the host).
    func finish(
        _ request: ConnectionSlot.PendingRequest, status: AppServiceResponseStatus, message: ByteBuffer?,
        error: String?, on connection: ConnectionHandler
    ) {
        connection.machine.requestEnded(bytes: request.messageBytes)
        if let index = request.metricsIndex {
            connection.loopMetrics?.answered(index, status: status, since: request.received)
        }
        defer { connection.closeIfDrained() }
        let body = message.map { EncodedValueSet(uncheckedBytes: $0) } ?? .empty
        // A download started with its request: attached now, its chunks after the response.
        var started: (answer: AttachedFrame, sends: Bool)?
        if status == .success, let attach = request.attach, let offered = request.offered {
            started = connection.transfers.attach(
                AttachFrame(id: request.clientRequest, transfer: offered.uuid, offset: 0, window: attach.window),
                on: connection)
        }
        let response = HostFrame.response(
            ResponseFrame(
                channel: request.number, id: request.clientRequest, status: status, message: body,
                error: error, attached: started?.answer
            )
        )
        guard started?.sends == true else { return connection.write(response) }
        // The answer and the first chunk, when the page cache holds it, go out in one flush: the
        // client reads them together, and its caller finds the bytes there as it takes up the
        // download.
        FlushesAfterRead.collecting {
            connection.write(response)
            connection.transfers.pump(on: connection)
        }
    }

    // MARK: - A service's own messages to the client

    /// A backend's own message to the client, sent unless its channel closed meanwhile (the
    /// backend was then answered as the channel closed).
    func sendServiceRequest(_ id: UInt64, number: UInt64, message: ByteBuffer, on connection: ConnectionHandler) {
        guard let slot = connection.link?.slot, let deadline = slot.book.withLock({ $0.outgoing[id]?.deadline })
        else { return }
        guard !connection.machine.inputClosed else {
            // The client half-closed: it can answer nothing more (see answerOutgoingAfterInputClosed).
            answerOutgoingAfterInputClosed(on: connection)
            return
        }
        connection.write(
            .request(RequestFrame(channel: number, id: id, message: EncodedValueSet(uncheckedBytes: message))))
        expectAnswers(by: deadline, on: connection)
    }

    /// The client's answer to a backend's message.
    func response(_ response: ResponseFrame, on connection: ConnectionHandler) {
        if let slot = connection.link?.slot, !connection.core.clientResponded(response, in: slot) {
            connection.logger.debug("a response to request \(response.id), which is not waiting for one; ignored")
        }
    }

    /// After a half-close the client can answer nothing more: the backends' messages waiting
    /// for its answer are answered now (RemoteSystemUnavailable), not at their timeout. A
    /// service that waits for such an answer before it answers the client's own request
    /// would otherwise hold the connection, and its slot, for the whole response timeout.
    func answerOutgoingAfterInputClosed(on connection: ConnectionHandler) {
        guard let slot = connection.link?.slot else { return }
        let waiting = slot.book.withLock { book -> [(UInt64, ConnectionSlot.OutgoingRequest)] in
            let ids = Array(book.outgoing.keys)
            return ids.compactMap { id in book.takeOutgoing(id).map { (id, $0) } }
        }
        connection.core.answer(waiting, status: .remoteSystemUnavailable)
    }

    // MARK: - The response timeout

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
    private func expectAnswers(by deadline: NIODeadline, on connection: ConnectionHandler) {
        if let armed = answerTimerDeadline, armed <= deadline { return }
        guard !connection.isRemoved else { return }
        answerTimer?.cancel()
        answerTimerDeadline = deadline
        answerTimer = connection.schedule(at: deadline) { connection in
            connection.channels.answerTimerFired(on: connection)
        }
    }

    /// Answers what is overdue (requests with status 2, messages to the backend with status 2)
    /// and sets the timer for the next deadline left.
    private func answerTimerFired(on connection: ConnectionHandler) {
        answerTimer = nil
        answerTimerDeadline = nil
        guard let slot = connection.link?.slot else { return }
        let core = connection.core
        let now = NIODeadline.now()
        let overdue = slot.book.withLock { $0.takeOverdue(at: now) }
        core.answerOverdue(overdue, on: connection)
        if let next = overdue.next { expectAnswers(by: max(next, now + core.answerCheckInterval), on: connection) }
    }

    /// The pipeline is gone: the timer with it.
    func stopTimer() {
        answerTimer?.cancel()
        answerTimer = nil
        answerTimerDeadline = nil
    }

    // MARK: - Closing channels

    func close(_ number: UInt64, on connection: ConnectionHandler) {
        guard let slot = connection.link?.slot, let handle = slot.book.withLock({ $0.numbers[number] }) else {
            connection.logger.debug("close of channel \(number), which is not open; ignored")
            return
        }
        closeChannel(
            handle, status: .completed, by: .client, requestStatus: .failure, reason: "the channel was closed",
            tellClient: false, on: connection)
    }

    /// Closes channel `handle` of this connection, if it is still open: what waits on it is
    /// answered (the client's requests with `requestStatus` and `reason`), the client is told
    /// with `status` (unless it closed the channel itself), and the backend with `closer`
    /// (unless it failed: then it hears nothing).
    func closeChannel(
        _ handle: UInt64, status: AppServiceClosedStatus, by closer: ChannelCloser,
        requestStatus: AppServiceResponseStatus, reason: String, outgoingStatus: AppServiceResponseStatus = .failure,
        tellClient: Bool = true, tellBackend: Bool = true, on connection: ConnectionHandler
    ) {
        guard let slot = connection.link?.slot, let closed = slot.book.withLock({ $0.removeChannel(handle) }) else {
            return
        }
        connection.core.settle(
            closed, on: connection, requestStatus: requestStatus, reason: reason, outgoingStatus: outgoingStatus)
        if tellClient { connection.write(.closed(ClosedFrame(channel: closed.channel.number, status: status))) }
        if tellBackend { closed.channel.backend.closed(channel: handle, status: status, by: closer) }
    }

    /// Closes every channel of `backend` on this connection (a reload retired it, or it failed).
    func closeChannels(
        of backend: any ServiceBackend, status: AppServiceClosedStatus, requestStatus: AppServiceResponseStatus,
        reason: String, on connection: ConnectionHandler
    ) {
        guard let slot = connection.link?.slot else { return }
        let handles = slot.book.withLock { book in book.channels.filter { $0.value.backend === backend }.map(\.key) }
        for handle in handles {
            closeChannel(
                handle, status: status, by: .host, requestStatus: requestStatus, reason: reason,
                tellBackend: status == .canceled, on: connection)
        }
    }

    /// The host is shutting down: requests still waiting are answered with status 4, and
    /// every channel closes as canceled.
    func hostIsStopping(on connection: ConnectionHandler) {
        guard let slot = connection.link?.slot else { return }
        let waiting = slot.book.withLock { book in
            let waiting = book.pending
            book.pending.removeAll()
            return waiting
        }
        for (_, request) in waiting {
            finish(
                request, status: .remoteSystemUnavailable, message: nil,
                error: "the host shut down before the service answered", on: connection)
        }
        for handle in slot.book.withLock({ Array($0.channels.keys) }) {
            closeChannel(
                handle, status: .canceled, by: .host, requestStatus: .failure, reason: "the host is shutting down",
                outgoingStatus: .remoteSystemUnavailable, on: connection)
        }
    }

    /// The connection is gone: every channel closes (backends are told, as canceled by the
    /// network), the client's requests are forgotten (late answers are refused), and the
    /// backends' messages to the client fail. Returns how many channels closed.
    func connectionEnded(slot: ConnectionSlot, core: HostCore) -> Int {
        let closed = slot.book.withLock { book in
            let closed = book.channels.keys.compactMap { book.removeChannel($0) }
            book.letGo()
            return closed
        }
        for channel in closed {
            core.settle(
                channel, on: nil, requestStatus: .failure, reason: "", outgoingStatus: .remoteSystemUnavailable)
            channel.channel.backend.closed(channel: channel.handle, status: .canceled, by: .network)
        }
        return closed.count
    }
}
