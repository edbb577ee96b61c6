import AtriumProtocol
import AtriumTransfers
import Foundation
import NIOCore
import NIOHTTP1

// An upload over HTTP (CONTRACT section 8): tus 1.0's `HEAD` and `PATCH` with `Upload-Offset`,
// or the IETF resumable-upload draft's `application/partial-upload` with `Upload-Complete`.
// A PATCH is an attachment of the transfer, as a frames client's `attach` is: its body goes to
// the spool as chunks under the host's window (reading the socket waits while the window is
// full), with the same syncs, and the answer says the bytes the host holds on stable storage.

extension TransferHTTPHandler {
    /// An upload a PATCH is bringing the bytes of.
    struct Receiving {
        var record: TransferRecord
        /// The next byte of the body goes at this offset.
        var next: Int64
        /// Bytes on stable storage (the host's last `ack`), and the bytes past them it takes.
        var held: Int64
        var window: Int64
        /// Body bytes read and not yet handed over (the window was full).
        var pending: [ByteBuffer] = []
        /// Whether this PATCH ends the upload (`Upload-Complete: ?1`, or its bytes reach the
        /// announced length), and the SHA-256 its client gave (`Upload-Checksum`).
        var completes: Bool
        var digest: [UInt8]?
        /// Whether the body has been read to its end, and the last (empty) chunk handed over.
        var bodyEnded = false
        var lastSent = false
        /// Whether the request uses the IETF draft (`Upload-Complete`) rather than tus.
        var draft: Bool
        /// What the host tells this PATCH's attachment goes through here (``told(_:patch:)``).
        var peer: TransferPeer
        /// The upload ended under this PATCH, and its answer waits for the journal to hold that.
        var ending = false
    }

    /// What tus 1.0 asks every answer to carry.
    static let tusHeaders: [(String, String)] = [
        ("Tus-Resumable", "1.0.0"), ("Tus-Version", "1.0.0"), ("Tus-Extension", "checksum"),
        ("Tus-Checksum-Algorithm", "sha256"),
    ]

    /// `HEAD` of an upload: the bytes the host holds on stable storage, and its length.
    func uploadHead(_ record: TransferRecord) {
        var headers: [(String, String)] = [
            ("Upload-Offset", "\(record.offset)"), ("Tus-Resumable", "1.0.0"), ("Cache-Control", "no-store"),
            ("Upload-Complete", record.phase == .waiting || record.phase == .running ? "?0" : "?1"),
        ]
        headers.append(record.size >= 0 ? ("Upload-Length", "\(record.size)") : ("Upload-Defer-Length", "1"))
        respondOnceJournaled(.ok, "", headers: headers, close: false, transfer: record.id)
    }

    /// Answers once the journal holds every change made so far: an `Upload-Offset` told is one
    /// the host resumes from after a crash, as an `ack` is. When the journal could not write
    /// `transfer`'s record, the answer is 503 instead: no offset that is not on disk is told.
    func respondOnceJournaled(
        _ status: HTTPResponseStatus, _ text: String, headers: [(String, String)], close: Bool,
        transfer: TransferID
    ) {
        guard let context else { return }
        phase = .answered
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        let loop = context.eventLoop
        service.afterJournal(of: transfer) { written in
            loop.execute {
                guard written else {
                    return handler.value.respond(
                        .serviceUnavailable, "the host cannot record this upload now: try again shortly\n",
                        headers: [("Retry-After", "1"), ("Tus-Resumable", "1.0.0")], close: close)
                }
                handler.value.respond(status, text, headers: headers, close: close)
            }
        }
    }

    /// A `PATCH`: checked, attached, then its body is taken as it comes.
    func beginUpload(_ record: TransferRecord, _ head: HTTPRequestHead) {
        let headers = head.headers
        if let version = headers.first(name: "tus-resumable"), version != "1.0.0" {
            return respond(
                .preconditionFailed, "this host speaks tus 1.0.0\n", headers: [("Tus-Version", "1.0.0")],
                close: !requestEnded)
        }
        let type = headers.first(name: "content-type")?.split(separator: ";").first.map {
            $0.trimmingCharacters(in: .whitespaces).lowercased()
        }
        guard type == "application/offset+octet-stream" || type == "application/partial-upload" else {
            return respond(
                .unsupportedMediaType,
                "a PATCH's body is application/offset+octet-stream (tus 1.0) or application/partial-upload\n",
                close: !requestEnded)
        }
        let draft = type == "application/partial-upload"
        guard let offsetText = headers.first(name: "upload-offset"), let offset = Int64(offsetText), offset >= 0 else {
            return respond(.badRequest, "a PATCH names the offset its body starts at (Upload-Offset)\n", close: true)
        }
        guard record.phase == .waiting || record.phase == .running else {
            return respond(
                .gone, "the upload has ended (\(record.phase.rawValue))\n",
                headers: [("Upload-Offset", "\(record.offset)"), ("Tus-Resumable", "1.0.0")], close: !requestEnded)
        }
        guard offset == record.offset else {
            return conflict(held: record.offset, "the host holds \(record.offset) bytes, not \(offset)", record.id)
        }
        var digest: [UInt8]?
        if let checksum = headers.first(name: "upload-checksum") {
            let parts = checksum.split(separator: " ")
            guard parts.count == 2, parts[0].lowercased() == "sha256",
                let bytes = Data(base64Encoded: String(parts[1])), bytes.count == 32
            else {
                return respond(
                    .badRequest, "Upload-Checksum is sha256 and the digest's 32 bytes in base64\n", close: true)
            }
            digest = Array(bytes)
        }
        let length = headers.first(name: "content-length").flatMap { Int64($0) }
        // Every number is the client's: compared without arithmetic that could overflow.
        if record.size >= 0, let length, length > record.size - offset {
            return respond(
                .payloadTooLarge, "the body is longer than the \(record.size - offset) bytes the upload has left\n",
                headers: [("Upload-Offset", "\(offset)"), ("Tus-Resumable", "1.0.0")], close: true)
        }
        let announced =
            record.size >= 0
            ? record.size : headers.first(name: "upload-length").flatMap { Int64($0) }.flatMap { $0 >= 0 ? $0 : nil }
        let completes: Bool
        if draft {
            completes = headers.first(name: "upload-complete") == "?1"
        } else if let length, let announced, announced >= offset {
            completes = length == announced - offset
        } else {
            completes = false
        }
        // Attached as a frames client is: the latest attach wins.
        // What the host tells this PATCH's attachment reaches it only while it is the one under
        // way: an earlier PATCH's late frames (its check, its delivery) are dropped.
        patches += 1
        let patch = patches
        let peer = TransferPeer {
            [loop = context!.eventLoop, handler = NIOLoopBound(self, eventLoop: context!.eventLoop)] frame in
            loop.execute { handler.value.told(frame, patch: patch) }
        }
        let outcome = service.attach(
            AttachFrame(id: 0, transfer: record.id.uuid), owner: record.owner, peer: peer, connection: connectionID)
        outcome.displaced.map { $0.link.tell(.state($0.state)) }
        let attached = outcome.answer
        guard attached.status == .success else {
            if attached.status == .resourceLimitsExceeded {
                return respond(
                    .serviceUnavailable, "the host takes no more transfers at once: \(attached.error ?? "")\n",
                    headers: [("Retry-After", "5")], close: true)
            }
            return respond(.gone, "the upload cannot go on: \(attached.error ?? "")\n", close: true)
        }
        guard Int64(attached.offset) == offset else {
            service.detach(record.id.uuid, owner: record.owner, connection: connectionID)
            return conflict(
                held: Int64(attached.offset), "the host holds \(attached.offset) bytes, not \(offset)", record.id)
        }
        upload = Receiving(
            record: record, next: offset, held: offset, window: Int64(attached.window), completes: completes,
            digest: digest, draft: draft, peer: peer)
        phase = .receiving
        logger.debug("HTTP PATCH transfer \(record.id): from \(offset)\(completes ? ", to the end" : "")")
        // A client that waits to be told to send its body (curl does, for a large one) is told
        // now, rather than sending it after a pause of its own.
        if headers.first(name: "expect")?.lowercased() == "100-continue", let context {
            context.writeAndFlush(
                wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .continue))), promise: nil)
        }
        if requestEnded { bodyEnded() }
    }

    /// 409: the offset is not the host's; the client goes on from the one given.
    func conflict(held: Int64, _ why: String, _ transfer: TransferID) {
        refused("409: \(why)")
        respondOnceJournaled(
            .conflict, "\(why): go on from Upload-Offset\n",
            headers: [("Upload-Offset", "\(held)"), ("Tus-Resumable", "1.0.0")], close: !requestEnded,
            transfer: transfer)
    }

    /// Body bytes of the PATCH.
    func received(_ bytes: ByteBuffer) {
        guard upload != nil else { return }
        lastMoved = .now()
        upload?.pending.append(bytes)
        feed()
    }

    func bodyEnded() {
        guard upload != nil else { return }
        upload?.bodyEnded = true
        feed()
    }

    /// Hands the read bytes over in chunks of `chunkBytes` (the body arrives in TLS records of
    /// 16 KiB at most: gathered, so that the spool writes and syncs as it does for frames)
    /// while the window has room; reading waits while a whole chunk waits for room. Once the
    /// body is all handed over: the last chunk, or the answer once synced.
    func feed() {
        guard var receiving = upload, phase == .receiving, !receiving.ending else { return }
        let chunkBytes = Int64(service.limits.chunkBytes)
        var waiting = receiving.pending.reduce(Int64(0)) { $0 + Int64($1.readableBytes) }
        while waiting > 0 {
            let want = min(chunkBytes, receiving.window - (receiving.next - receiving.held))
            guard want > 0, waiting >= want || receiving.bodyEnded else { break }
            let count = Int(min(want, waiting))
            let data = Self.take(count, from: &receiving.pending)
            waiting -= Int64(count)
            // Whether the client's bytes stop here until this chunk is synced: the window is
            // full after it, or the body has ended (with nothing past it).
            let waits =
                receiving.window - (receiving.next + Int64(count) - receiving.held) < chunkBytes
                || (receiving.bodyEnded && waiting == 0)
            // The chunk that reaches an announced size is the last: it carries the digest given.
            let last =
                receiving.completes && receiving.record.size >= 0
                && receiving.next + Int64(count) == receiving.record.size
            if last { receiving.lastSent = true }
            if case .state(let state) = service.chunk(
                ChunkFrame(
                    transfer: receiving.record.id.uuid, offset: UInt64(receiving.next), data: data, last: last,
                    digest: last ? receiving.digest : nil),
                owner: receiving.record.owner, connection: connectionID, waits: waits)
            {
                return stop(receiving, state)
            }
            receiving.next += Int64(count)
        }
        // Reading waits while a whole chunk waits for room.
        holdingReads = waiting >= chunkBytes
        resumeReading()
        if receiving.bodyEnded, receiving.pending.isEmpty, receiving.completes, !receiving.lastSent {
            receiving.lastSent = true
            upload = receiving
            if case .state(let state) = service.chunk(
                ChunkFrame(
                    transfer: receiving.record.id.uuid, offset: UInt64(receiving.next), data: ByteBuffer(), last: true,
                    digest: receiving.digest),
                owner: receiving.record.owner, connection: connectionID)
            {
                return stop(receiving, state)
            }
            return
        }
        upload = receiving
        // A PATCH that does not end the upload is answered once all it brought is synced.
        if receiving.bodyEnded, receiving.pending.isEmpty, !receiving.completes, receiving.held == receiving.next {
            answered(held: receiving.held, complete: false)
        }
    }

    /// The upload stopped under this PATCH with `state`: answered at once, or, when it ended
    /// here (past its length, no room), once the journal holds that, as a frames client is told
    /// (``TransferService/tell(_:to:paced:)``); nothing more of the body is taken meanwhile.
    private func stop(_ receiving: Receiving, _ state: TransferStateFrame) {
        guard service.waitsForJournal(state) else {
            upload = receiving
            return stopped(state)
        }
        var ending = receiving
        ending.ending = true
        upload = ending
        holdingReads = true
        service.tell(state, to: ending.peer)
    }

    /// The first `count` bytes of `buffers` (which hold at least that many), as one buffer: a
    /// slice of the first when it holds them all, else gathered.
    static func take(_ count: Int, from buffers: inout [ByteBuffer]) -> ByteBuffer {
        if buffers[0].readableBytes >= count {
            let slice = buffers[0].readSlice(length: count)!
            if buffers[0].readableBytes == 0 { buffers.removeFirst() }
            return slice
        }
        var gathered = ByteBuffer()
        gathered.reserveCapacity(count)
        while gathered.readableBytes < count {
            let part = min(count - gathered.readableBytes, buffers[0].readableBytes)
            var slice = buffers[0].readSlice(length: part)!
            gathered.writeBuffer(&slice)
            if buffers[0].readableBytes == 0 { buffers.removeFirst() }
        }
        return gathered
    }

    /// What the host tells the upload's attachment (on this connection's loop).
    func told(_ frame: HostTransferFrame, patch: UInt64) {
        guard var receiving = upload, phase == .receiving, patch == patches else { return }
        let transfer: UUID? =
            switch frame {
            case .ack(let ack): ack.transfer
            case .state(let state): state.transfer
            default: nil
            }
        guard transfer == receiving.record.id.uuid else { return }
        switch frame {
        case .ack(let ack):
            lastMoved = .now()
            receiving.held = Int64(ack.offset)
            receiving.window = Int64(ack.window)
            upload = receiving
            feed()
        case .state(let state):
            switch state.state {
            case "delivering", "completed":
                // Every byte is in, synced, and checked (its size, its SHA-256): the upload
                // goes to its service, whose answer is the transfer's result.
                answered(held: Int64(state.offset), complete: true)
            case "running", "verifying":
                // Checked now: the answer says how that went.
                lastMoved = .now()
            default:
                stopped(state)
            }
        default:
            break
        }
    }

    /// The PATCH is done: 204 with the bytes the host holds on stable storage.
    func answered(held: Int64, complete: Bool) {
        guard let receiving = upload else { return }
        upload = nil
        holdingReads = false
        service.detach(receiving.record.id.uuid, owner: receiving.record.owner, connection: connectionID)
        var headers: [(String, String)] = [("Upload-Offset", "\(held)"), ("Tus-Resumable", "1.0.0")]
        if receiving.draft { headers.append(("Upload-Complete", complete ? "?1" : "?0")) }
        logger.debug("HTTP PATCH transfer \(receiving.record.id): holds \(held)\(complete ? ", complete" : "")")
        phase = .answered
        respond(.noContent, "", headers: headers, close: !requestEnded)
        resumeReading()
    }

    /// The upload cannot go on with this PATCH: the answer its error calls for, and the
    /// connection closes (what is left of the body is not read).
    func stopped(_ state: TransferStateFrame) {
        guard let receiving = upload else { return }
        upload = nil
        holdingReads = false
        service.detach(receiving.record.id.uuid, owner: receiving.record.owner, connection: connectionID)
        let error = state.error ?? state.state
        let held = [("Upload-Offset", "\(state.offset)"), ("Tus-Resumable", "1.0.0")]
        logger.info("HTTP PATCH transfer \(receiving.record.id) stopped: \(state.state), \(error)")
        phase = .answered
        switch error {
        case TransferErrorCode.offsetMismatch.rawValue, TransferErrorCode.windowExceeded.rawValue,
            TransferErrorCode.attachedElsewhere.rawValue:
            respond(.conflict, "\(error): go on from Upload-Offset\n", headers: held, close: true)
        case TransferErrorCode.lengthExceeded.rawValue:
            respond(
                .payloadTooLarge, "more bytes than the upload's length: it has failed\n", headers: held, close: true)
        case TransferErrorCode.digestMismatch.rawValue:
            respond(
                HTTPResponseStatus(statusCode: 460, reasonPhrase: "Checksum Mismatch"),
                "the file's SHA-256 is not the one given: the upload has failed\n", headers: held, close: true)
        case TransferErrorCode.insufficientStorage.rawValue:
            respond(
                .insufficientStorage, "the host has no room for it: the upload has failed\n", headers: held, close: true
            )
        default:
            respond(.gone, "the upload has ended (\(state.state), \(error))\n", headers: held, close: true)
        }
    }
}
