import AtriumTransfers
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// One connection whose client asked for HTTP (CONTRACT section 8): each request names a
/// transfer (`/transfers/ID`) and carries its link's bearer (`Authorization: Bearer`). A
/// download answers `GET` and `HEAD` as a static file does (RFC 9110: validators, one range,
/// `If-Range`). Every other path, and every request no bearer admits, is 404.
///
/// What a client can make it hold: one request at a time (pipelined requests wait in
/// NIOHTTP1's pipelining handler, which stops reading meanwhile); a request head under
/// ``TransferHTTP``'s limits; two chunks of a download read and not yet written; and time:
/// a connection that sends no whole request head, or lets a response's bytes sit unread,
/// for `--transfer-http-timeout` is closed.
///
/// On the connection's event loop only.
final class TransferHTTPHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    let core: HostCore
    var logger: Logger
    var service: TransferService { core.transfers }
    var context: ChannelHandlerContext?
    /// What the transfers' table knows this connection as, while an upload is attached to it.
    let connectionID: UInt64
    /// The upload a PATCH is bringing the bytes of, and how many PATCHes this connection has
    /// begun (the last is the one the host's frames are for).
    var upload: Receiving?
    var patches: UInt64 = 0
    /// Whether reading the socket waits (an upload's window is full), and whether a read was
    /// asked for meanwhile.
    var holdingReads = false
    var readWanted = false

    /// What the connection is doing.
    enum Phase {
        /// Waiting for a request's head.
        case idle
        /// A request answered (or being answered) whose remaining parts are read and dropped.
        case answered
        /// A download's bytes going out.
        case sending
        /// An upload's bytes coming in (a PATCH).
        case receiving
        /// The connection is closing: what else arrives is dropped.
        case closing
    }
    var phase = Phase.idle
    /// Whether the request being answered ended (its `.end` read).
    var requestEnded = false
    /// Whether the response under way leaves the connection open after.
    var keepAlive = true
    /// Whether this connection counts against `--transfer-http-connections`.
    private var counted = false
    /// The download being sent.
    private var download: Sending?
    private var timer: Scheduled<Void>?
    /// When the connection last moved: a request head arrived, or a response's bytes went out.
    var lastMoved = NIODeadline.now()
    /// When the connection began, whether a request head has come yet, and since when it has
    /// been closing.
    let began = NIODeadline.now()
    var requested = false
    var closingSince: NIODeadline?

    private struct Sending {
        var id: TransferID
        var file: DownloadFile
        var next: Int64
        var end: Int64
        /// Whether the request says the client holds the bytes before its range.
        var resumes: Bool
        /// Chunks written and not yet gone to the socket, and whether one is being read.
        var writing = 0
        var reading = false
        var endWritten = false
    }

    /// The most chunks of a download read ahead and written, not yet gone to the socket.
    static let maxChunksOut = 2
    /// How long a new connection has for its TLS handshake and first request head.
    static let firstRequestTimeout = TimeAmount.seconds(5)

    init(core: HostCore, logger: Logger) {
        self.core = core
        self.logger = logger
        connectionID = core.makeId()
    }

    /// Reads wait while an upload's window is full, and go on once the disk catches up; and
    /// while answers wait to be sent (a client that sends requests and reads no answer is not
    /// read from either).
    func read(context: ChannelHandlerContext) {
        guard !holdingReads, context.channel.isWritable else {
            readWanted = true
            return
        }
        context.read()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, !holdingReads, readWanted {
            readWanted = false
            context.read()
        }
        context.fireChannelWritabilityChanged()
    }

    /// Reads again if they waited and may go on now.
    func resumeReading() {
        guard let context, !holdingReads, readWanted, context.channel.isWritable else { return }
        readWanted = false
        context.read()
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        let channel = context.channel
        service.httpChannels.withLock { $0[ObjectIdentifier(channel)] = channel }
        // One read of the socket at a time: what a client that sends requests and reads no
        // answer gets answered past the high-water mark is what one read holds, not several.
        try? channel.syncOptions?.setOption(.maxMessagesPerRead, value: 1)
        if let remote = context.remoteAddress { logger[metadataKey: "peer"] = "\(remote)" }
        let open = service.httpConnections.wrappingAdd(1, ordering: .relaxed).newValue
        counted = true
        if open > service.limits.httpConnections {
            core.breaches.record(
                "HTTP connection refused",
                "HTTP connection refused: \(service.limits.httpConnections) are open (--transfer-http-connections)",
                metadata: ["peer": "\(context.remoteAddress.map { "\($0)" } ?? "?")"])
            tooMany = true
        }
        armTimer()
    }

    /// Set when the connection came past `--transfer-http-connections`: its request gets 503.
    private var tooMany = false

    func handlerRemoved(context: ChannelHandlerContext) {
        release()
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        release()
        context.fireChannelInactive()
    }

    private func release() {
        timer?.cancel()
        timer = nil
        download = nil
        if let channel = context?.channel {
            _ = service.httpChannels.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) }
        }
        if upload != nil {
            upload = nil
            service.connectionClosed(connectionID)
        }
        phase = .closing
        if counted {
            counted = false
            service.httpConnections.wrappingSubtract(1, ordering: .relaxed)
        }
    }

    // MARK: - Requests

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            guard phase == .idle else { return }
            lastMoved = .now()
            requested = true
            requestEnded = false
            keepAlive = head.isKeepAlive
            answer(head)
        case .body(let bytes):
            // Only an upload's PATCH has a body the host reads; others are refused before.
            if phase == .receiving { received(bytes) }
        case .end:
            requestEnded = true
            if phase == .answered { phase = .idle }
            if phase == .receiving { bodyEnded() }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard phase != .closing else { return }
        let status: HTTPResponseStatus
        switch error as? HTTPParserError {
        case .headerOverflow?: status = .requestHeaderFieldsTooLarge
        case .some: status = .badRequest
        case nil:
            // Not HTTP's: the connection's (TLS, the socket).
            logger.debug("HTTP connection failed: \(error)")
            context.close(promise: nil)
            return
        }
        core.breaches.record(
            "HTTP request refused", level: .info, "HTTP request refused (\(status.code)): \(error)",
            metadata: ["peer": "\(context.remoteAddress.map { "\($0)" } ?? "?")"])
        guard phase == .idle || phase == .answered else {
            context.close(promise: nil)
            return
        }
        // What was read cannot be trusted to end where a next request begins: the answer,
        // then the connection closes.
        respond(status, "the request is not one HTTP/1.1 allows: \(error)\n", close: true)
    }

    private func answer(_ head: HTTPRequestHead) {
        if tooMany {
            return respond(
                .serviceUnavailable, "too many HTTP connections are open; try again shortly\n",
                headers: [("Retry-After", "5")], close: true)
        }
        guard head.uri.utf8.count <= TransferHTTP.maxTargetBytes else {
            refused("target over \(TransferHTTP.maxTargetBytes) bytes")
            return respond(
                .uriTooLong, "the request target is over \(TransferHTTP.maxTargetBytes) bytes\n", close: true)
        }
        var total = 0
        for (name, value) in head.headers {
            let size = name.utf8.count + value.utf8.count
            total += size
            guard size <= TransferHTTP.maxFieldBytes, total <= TransferHTTP.maxHeaderBytes else {
                refused("header fields over their limit")
                return respond(
                    .requestHeaderFieldsTooLarge,
                    "a header field is over \(TransferHTTP.maxFieldBytes) bytes, or all of them over \(TransferHTTP.maxHeaderBytes)\n",
                    close: true)
            }
        }
        guard let transfer = Self.transfer(in: head.uri) else {
            return notFound("no such path: only /transfers/ID is served", head)
        }
        guard let bearer = Self.bearer(in: head.headers) else {
            return notFound("no bearer (Authorization: Bearer)", head)
        }
        guard let record = service.httpAdmitted(transfer, bearer: bearer) else {
            return notFound("no transfer that this bearer admits (wrong, expired or of another transfer)", head)
        }
        // A body on a request that takes none: its end cannot be trusted to be read right.
        if head.method != .PATCH,
            head.headers.contains(name: "transfer-encoding")
                || (head.headers.first(name: "content-length").flatMap(Int.init) ?? 0) > 0
        {
            refused("a body on \(head.method)")
            return respond(.badRequest, "a \(head.method) request has no body\n", close: true)
        }
        switch (record.direction, head.method) {
        case (.download, .GET), (.download, .HEAD):
            switch service.httpDownload(record) {
            case .failure(let refusal):
                notFound("\(refusal)", head)
            case .success(let found):
                serve(found, head)
            }
        case (.download, .OPTIONS):
            respond(.noContent, "", headers: [("Allow", "GET, HEAD, OPTIONS")], close: false)
        case (.download, _):
            respond(
                .methodNotAllowed, "a download answers GET and HEAD\n", headers: [("Allow", "GET, HEAD, OPTIONS")],
                close: !requestEnded)
        case (.upload, .HEAD):
            uploadHead(record)
        case (.upload, .OPTIONS):
            respond(.noContent, "", headers: Self.tusHeaders + [("Allow", "OPTIONS, HEAD, PATCH")], close: false)
        case (.upload, .PATCH):
            beginUpload(record, head)
        case (.upload, _):
            respond(
                .methodNotAllowed, "an upload answers HEAD and PATCH (tus 1.0)\n",
                headers: [("Allow", "OPTIONS, HEAD, PATCH")], close: !requestEnded)
        }
    }

    /// `/transfers/ID` (a query is ignored): the transfer's uuid.
    static func transfer(in target: String) -> UUID? {
        let path = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        guard path.hasPrefix("/transfers/") else { return nil }
        return UUID(uuidString: String(path.dropFirst("/transfers/".count)))
    }

    /// The bearer of `Authorization: Bearer TOKEN`.
    static func bearer(in headers: HTTPHeaders) -> String? {
        let values = headers["authorization"]
        guard values.count == 1 else { return nil }
        let parts = values[0].split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        return String(parts[1])
    }

    func refused(_ why: String) {
        core.breaches.record(
            "HTTP request refused", level: .info, "HTTP request refused: \(why)",
            metadata: ["peer": "\(context?.remoteAddress.map { "\($0)" } ?? "?")"])
    }

    private func notFound(_ why: String, _ head: HTTPRequestHead) {
        refused("404 to \(head.method): \(why)")
        respond(.notFound, "no such transfer, or its link has expired\n", close: !requestEnded)
    }

    // MARK: - Downloads

    private func serve(_ found: TransferService.HTTPDownload, _ head: HTTPRequestHead) {
        let record = found.record
        let source = found.file.source
        let size = record.size
        let entityTag = HTTPFileHeaders.entityTag(of: source)
        let lastModified = HTTPFileHeaders.date(nanoseconds: source.modified)
        var headers = HTTPHeaders([
            ("Accept-Ranges", "bytes"), ("ETag", entityTag), ("Last-Modified", lastModified),
            ("Content-Type", "application/octet-stream"),
            ("Content-Disposition", HTTPFileHeaders.contentDisposition(name: record.name)),
            ("Cache-Control", "private, no-store"),
        ])
        var range = 0..<size
        var status = HTTPResponseStatus.ok
        let rangeValue = head.headers.first(name: "range")
        if HTTPFileHeaders.ifRangeHolds(
            head.headers.first(name: "if-range"), entityTag: entityTag, lastModified: lastModified)
        {
            switch HTTPFileHeaders.range(rangeValue, size: size) {
            case .whole:
                break
            case .part(let part):
                range = part
                status = .partialContent
                headers.add(name: "Content-Range", value: "bytes \(part.lowerBound)-\(part.upperBound - 1)/\(size)")
            case .unsatisfiable:
                headers.add(name: "Content-Range", value: "bytes */\(size)")
                return respond(.rangeNotSatisfiable, "", headers: Array(headers), close: false)
            }
        }
        headers.add(name: "Content-Length", value: "\(range.count)")
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        logger.debug(
            "HTTP \(head.method) transfer \(record.id): \(status.code), bytes \(range.lowerBound)..<\(range.upperBound) of \(size)"
        )
        guard let context else { return }
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        // A request for the file from a byte to its end says the client holds what comes
        // before, as a frame's attach at that offset does; one for its last bytes does not.
        let resumes = status == .ok || HTTPFileHeaders.isOpenEnded(rangeValue)
        if head.method == .HEAD || range.isEmpty {
            if head.method == .GET, range.upperBound == size {
                _ = service.httpSent(record.id, range, resumes: resumes)
            }
            return finish()
        }
        phase = .sending
        download = Sending(
            id: record.id, file: found.file, next: range.lowerBound, end: range.upperBound, resumes: resumes)
        context.flush()
        pump()
    }

    /// Reads and writes the download's next chunks, at most ``maxChunksOut`` out at once.
    private func pump() {
        guard let context, phase == .sending, var sending = download else { return }
        let chunk = Int64(service.limits.chunkBytes)
        while !sending.reading, sending.writing + 1 <= Self.maxChunksOut, sending.next < sending.end {
            let range = sending.next..<min(sending.next + chunk, sending.end)
            if let bytes = sending.file.cachedBuffer(range, allocator: context.channel.allocator) {
                sending.next = range.upperBound
                sending.writing += 1
                download = sending
                write(bytes, range)
                guard let again = download else { return }
                sending = again
                continue
            }
            sending.reading = true
            download = sending
            let file = sending.file
            let allocator = context.channel.allocator
            service.pool.runIfActive(eventLoop: context.eventLoop) { file.buffer(range, allocator: allocator) }
                .assumeIsolated().whenComplete { [self] result in
                    guard var sending = download else { return }
                    sending.reading = false
                    guard case .success(.success(let bytes)) = result else {
                        // The file changed or cannot be read: the transfer fails, and the
                        // response cannot be finished (its length was promised).
                        if case .success(.failure(let failure)) = result,
                            let (link, state) = service.readFailed(sending.id, changed: failure == .changed)
                        {
                            service.tell(state, to: link)
                        }
                        logger.notice("HTTP download of transfer \(sending.id) stopped: its file cannot be read")
                        return close()
                    }
                    sending.next = range.upperBound
                    sending.writing += 1
                    download = sending
                    write(bytes, range)
                    pump()
                }
            return
        }
        download = sending
        if sending.next == sending.end, sending.writing == 0, !sending.endWritten {
            download?.endWritten = true
            download = nil
            finish()
        }
    }

    private func write(_ bytes: ByteBuffer, _ range: Range<Int64>) {
        guard let context, let id = download?.id, let resumes = download?.resumes else { return }
        let written = context.eventLoop.makePromise(of: Void.self)
        written.futureResult.assumeIsolated().whenComplete { [self] result in
            guard case .success = result else { return close() }
            lastMoved = .now()
            // A transfer removed meanwhile (revoked, forgotten, expired) is sent no further.
            guard service.httpSent(id, range, resumes: resumes) else {
                logger.info("HTTP download of transfer \(id) stopped: it is gone")
                return close()
            }
            guard download != nil else { return }
            download?.writing -= 1
            pump()
        }
        context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(bytes))), promise: written)
    }

    // MARK: - Responses

    /// A whole response: `status`, a short text saying why, and `headers`.
    func respond(
        _ status: HTTPResponseStatus, _ text: String, headers extra: [(String, String)] = [], close: Bool
    ) {
        guard let context else { return }
        if close { keepAlive = false }
        var headers = HTTPHeaders(extra)
        if !text.isEmpty { headers.add(name: "Content-Type", value: "text/plain; charset=utf-8") }
        if !headers.contains(name: "content-length") {
            headers.add(name: "Content-Length", value: "\(text.utf8.count)")
        }
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        if !text.isEmpty { context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: text)))), promise: nil) }
        finish()
    }

    /// Ends the response: the connection waits for the next request, or closes.
    func finish() {
        guard let context else { return }
        let keep = keepAlive
        phase = keep ? (requestEnded ? .idle : .answered) : .closing
        if !keep { closingSince = .now() }
        lastMoved = .now()
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { [self] result in
            if case .failure = result { return close() }
            if !keep { close() }
        }
    }

    func close() {
        phase = .closing
        closingSince = closingSince ?? .now()
        download = nil
        // An upload this connection had attached waits for its client from now, not from
        // when the close completes.
        if upload != nil {
            upload = nil
            service.connectionClosed(connectionID)
        }
        context?.close(promise: nil)
    }

    // MARK: - Time

    /// Checks every second that the connection moves: a request head is awaited, or a
    /// response's bytes go out, within `--transfer-http-timeout`.
    private func armTimer() {
        guard let context else { return }
        let timeout = TimeAmount.nanoseconds(Int64(service.limits.httpTimeout.seconds * 1e9))
        let step = min(TimeAmount.seconds(1), timeout)
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: step) { [self] in
            timer = nil
            guard let context = self.context else { return }
            // A close that waits for its last answer to go out waits no longer than this.
            if phase == .closing {
                if let closingSince, NIODeadline.now() - closingSince > min(timeout, .seconds(2)) {
                    return context.close(promise: nil)
                }
                return armTimer()
            }
            // The first request comes soon after the handshake, or the connection goes: a
            // stranger holds a place among the HTTP connections for seconds, not the timeout.
            if !requested, NIODeadline.now() - began > min(timeout, Self.firstRequestTimeout) {
                logger.info("HTTP connection closed: no request within \(Self.firstRequestTimeout)")
                return close()
            }
            // A complete upload being checked (its SHA-256 read back, after a resume), or one
            // that failed here waiting for the journal to hold that, is the host's wait, not the
            // client's.
            let checking = phase == .receiving && (upload?.lastSent == true || upload?.ending == true)
            if !checking, NIODeadline.now() - lastMoved > timeout {
                let waiting =
                    switch phase {
                    case .sending: "its client to read a response"
                    case .receiving: "an upload's bytes"
                    default: "a request"
                    }
                logger.info(
                    "HTTP connection closed: no progress for \(service.limits.httpTimeout) waiting for \(waiting)")
                return close()
            }
            armTimer()
        }
    }
}
