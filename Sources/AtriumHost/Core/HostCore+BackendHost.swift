import AtriumProtocol
import AtriumTransfers
import AtriumValues
import Logging
import NIOCore

/// The host's side of the service seam (``BackendHost``): what backends call, from any thread,
/// to answer a client's request, send the client a message of their own, close a channel or
/// launch a URI. Each call finds the connection by the slot its id names, under that
/// connection's lock alone, and hands the frame to the connection's loop.
extension HostCore {
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

    /// A launch a backend asked for. With `channel`, it is made on behalf of that channel's
    /// client, with the client's identity and under the client's policy (a remote client
    /// cannot launch through a plugin what it could not launch itself). Without one it is
    /// checked as a remote client's launch: the host cannot tell whom the backend acts for,
    /// so it grants no more than the least trusted caller gets. Blocks while the handler
    /// runs (up to the response timeout for a backend): call it off the event loop.
    func launch(fromBackend backend: any ServiceBackend, channel: UInt64?, uri: String, data: [UInt8]?)
        -> LaunchOutcome
    {
        let request = LaunchRequestInfo(uri: uri, package: nil, fallbackUri: nil, preferredPackages: [], data: data)
        var clientId = ""
        var isRemote = true
        var description = "plugin \(backend.package)"
        if let channel {
            guard
                let client = slot(of: channel)?.book.withLock({ book in
                    book.channel(channel, of: backend).map { _ in (book.clientId, book.isRemote) }
                })
            else {
                return LaunchOutcome(
                    status: .unknown, error: "channel \(channel) is not an open channel of package \(backend.package)")
            }
            (clientId, isRemote) = client
            description += " for client \(untrusted(clientId, limit: 64))"
        }
        guard launcher.takeSlot() else {
            breaches.record("launches", "the host reached --max-launches")
            return LaunchOutcome(
                status: .deniedByRemoteSystem,
                error: "the host has \(admission.maxLaunches) launches in flight, its limit")
        }
        defer { launcher.releaseSlot() }
        return launcher.launch(request, clientId: clientId, clientDescription: description, isRemote: isRemote)
    }

    /// A backend offers a file to the caller of `handle`, one of its requests still waiting
    /// for its answer: the transfer belongs to that caller, and to the service it opened.
    func offer(_ descriptor: Int32, name: String?, for handle: UInt64, from backend: any ServiceBackend)
        -> Result<TransferID, TransferService.OfferRefusal>
    {
        guard let maker = maker(of: handle, backend) else { return .failure(.unknownRequest) }
        let offered = transfers.offer(descriptor, name: name, for: maker)
        if maker.attachWanted, case .success(let id) = offered {
            // The request asked to attach the download it starts: the first one is it.
            slot(of: handle)?.book.withLock { book in
                if book.pending[handle]?.offered == nil { book.pending[handle]?.offered = id }
            }
        }
        return offered
    }

    /// A backend accepts an upload from the caller of `handle`, one of its requests still
    /// waiting for its answer.
    func accept(
        size: Int64, maxSize: Int64, name: String?, for handle: UInt64, from backend: any ServiceBackend
    ) -> Result<TransferID, TransferService.OfferRefusal> {
        guard let maker = maker(of: handle, backend) else { return .failure(.unknownRequest) }
        return transfers.accept(size: size, maxSize: maxSize, name: name, for: maker)
    }

    /// Who a transfer made while answering `handle` is for, if `handle` is a request of
    /// `backend`'s still waiting for its answer.
    private func maker(of handle: UInt64, _ backend: any ServiceBackend) -> TransferService.Maker? {
        slot(of: handle)?.book.withLock { book -> TransferService.Maker? in
            guard let request = book.pending[handle], request.backend === backend, let owner = book.owner,
                let channel = book.channels[request.channel]
            else { return nil }
            return TransferService.Maker(
                owner: owner, package: backend.package, service: channel.service,
                attachWanted: request.attach != nil)
        }
    }

    func deliveryDropped(_ delivery: UInt64) {
        transfers.deliveryDropped(delivery)
    }

    /// A backend's answer to a finished upload: its message (checked as an answer's is)
    /// becomes the transfer's result.
    func uploadDone(
        _ delivery: UInt64, from backend: any ServiceBackend, status: AppServiceResponseStatus, message: ByteBuffer?,
        error: String?
    ) -> Result<Void, BackendCallError> {
        var result: [UInt8]?
        if let message, message.readableBytes > 0 {
            guard message.readableBytes <= limits.maxMessageBytes else { return .failure(.tooLarge) }
            guard Self.invalidity(of: message) == nil else { return .failure(.notAValueSet) }
            result = Array(message.readableBytesView)
        }
        switch transfers.delivered(
            delivery, package: backend.package, status: status, result: result,
            error: error.map { untrusted($0, limit: Self.maxPluginReason) })
        {
        case .failure(let refusal): return .failure(refusal)
        case .success(let told):
            if let told { tell([told]) }
            return .success(())
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
}
