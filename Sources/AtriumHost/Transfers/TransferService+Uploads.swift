import AtriumProtocol
import AtriumTransfers
import AtriumValues
import Crypto
import Dispatch
import Foundation
import NIOCore
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// An unfinished upload's spool file, and what has been written to it. Writes, syncs and the
/// digest run on its own serial queue, in the order the chunks came; the counts below the
/// queue's are kept under the service's lock.
final class UploadSpool: @unchecked Sendable {
    let file: SpoolFile
    let queue: DispatchQueue
    // On `queue` only:
    /// The SHA-256 of the bytes from 0 to `hashed`; `hashed` is -1 once a write went anywhere
    /// but its end (a resumed upload sent again what was written and not synced): the digest
    /// is then read back from the file at the end.
    var hasher = SHA256()
    var hashed: Int64
    /// Bytes written since the last sync.
    var unsynced: Int64 = 0
    // Under the service's lock:
    /// Chunks handed to `queue` and not written yet.
    var queued = 0

    init(file: SpoolFile, id: TransferID, fresh: Bool) {
        self.file = file
        queue = DispatchQueue(label: "atriumd.transfers.upload.\(id)")
        hashed = fresh ? 0 : -1
    }
}

/// A finished upload handed to its service.
struct UploadDelivery: Sendable {
    var delivery: UInt64
    var record: TransferRecord
    /// The file, open for reading: the service's to close.
    var descriptor: Int32
}

/// What handing an upload to its service came to.
enum DeliveryVerdict: Sendable {
    /// The service has it; its answer comes through ``TransferService/delivered(_:status:result:error:)``.
    case taken
    /// The service is not there now (its package failed, or is being reloaded): tried again later.
    case later(String)
    /// The service takes no uploads: the transfer fails.
    case refused(String)
}

extension TransferService {
    /// The most bytes written to an upload's spool between two syncs: a sync, then an `ack`,
    /// at least every quarter window, and whenever the chunks written so far are all the
    /// client has sent.
    var syncBatchBytes: Int64 { max(limits.windowBytes / 4, 1) }

    // MARK: - Accepting

    /// A service accepts an upload of `size` bytes (-1: not known, then at most `maxSize`, or
    /// the host's limits when that is -1) from the caller of the request it is answering. Its
    /// space is reserved now.
    func accept(size: Int64, maxSize: Int64, name: String?, for maker: Maker) -> Result<TransferID, OfferRefusal> {
        if let unavailable { return .failure(.unavailable(unavailable)) }
        guard size >= -1, maxSize >= -1 else { return .failure(.invalid("a size or a maximum below -1")) }
        let record = TransferRecord(
            owner: maker.owner, direction: .upload, package: maker.package, service: maker.service,
            name: name.map { untrusted($0, limit: 1024) }, size: size, maxSize: maxSize, now: Date())
        let added = state.withLock { $0.table.add(record) }
        guard case .success(let made) = added else {
            if case .failure(let refusal) = added {
                logger.notice("upload refused: \(refusal)", metadata: ["package": "\(maker.package)"])
                return .failure(.limit(refusal))
            }
            return .failure(.unavailable("the upload could not be made"))
        }
        // The spool file, its space reserved, outside the lock: a disk that cannot hold it
        // refuses now, not at 90%.
        let file: SpoolFile
        do {
            file = try SpoolFile.open(
                made.id, in: spoolFolder, reserve: size > 0 ? size : nil, floor: limits.freeSpaceFloorBytes)
        } catch {
            _ = state.withLock { $0.table.remove(made.id) }
            logger.notice("upload refused: \(error)", metadata: ["package": "\(maker.package)"])
            return .failure(.storage("\(error)"))
        }
        state.withLock { state in
            state.spools[made.id] = UploadSpool(file: file, id: made.id, fresh: true)
            unwrittenChange(made, in: &state)
        }
        logger.debug("transfer \(made.id) made: \(maker.package) accepts \(size) bytes from \(maker.owner)")
        return .success(made.id)
    }

    /// The spool file of an upload after a restart, opened again (outside the lock).
    func reopenSpool(_ id: TransferID, held: Int64) -> UploadSpool? {
        do {
            let file = try SpoolFile.open(id, in: spoolFolder)
            return UploadSpool(file: file, id: id, fresh: held == 0)
        } catch {
            logger.warning("transfer \(id): its spool file cannot be opened again: \(error)")
            return nil
        }
    }

    /// The window an upload attached to `connection` is granted: the host's window, within
    /// the connection's share when it has several attached.
    func uploadGrant(on connection: UInt64, _ state: State) -> Int64 {
        let attached = max(state.byConnection[connection]?.count ?? 1, 1)
        return max(min(limits.windowBytes, limits.connectionWindowBytes / Int64(attached)), 1)
    }

    // MARK: - Taking bytes

    /// What a client's chunk leads to at once (its bytes are written later, and acknowledged
    /// once synced).
    enum ChunkOutcome {
        case none
        /// The transfer's state to tell the client: waiting after a refusal, or failed.
        case state(TransferStateFrame)
    }

    func chunk(_ frame: ChunkFrame, owner: TransferOwner, connection: UInt64) -> ChunkOutcome {
        let id = TransferID(frame.transfer)
        let now = Date()
        return state.withLock { state in
            guard let record = state.table.find(id, owner: owner), var attached = state.attached[id],
                attached.connection == connection, var window = attached.upload, let spool = state.spools[id]
            else { return .none }
            let count = frame.data.readableBytes
            // Offsets are at most Int64.max (the frame's check); the sum is compared as what is left.
            let offset = Int64(frame.offset)
            if record.size < 0, count > 0 {
                guard offset <= Int64.max - Int64(count), state.table.mayGrow(id, to: offset + Int64(count)) else {
                    return failLocked(id, .insufficientStorage, now: now, &state)
                }
            }
            switch window.chunk(offset: offset, count: count, last: frame.last, digest: frame.digest) {
            case .ignore:
                return .none
            case .refuse(let code):
                removeFromConnection(id, connection, &state)
                let waiting = state.table.detach(id, from: connection, error: code) ?? record
                unwrittenChange(waiting, in: &state)
                return .state(stateFrame(of: waiting))
            case .fail(let code):
                return failLocked(id, code, now: now, &state)
            case .write(let at):
                attached.upload = window
                state.attached[id] = attached
                spool.queued += 1
                let generation = attached.generation
                let data = frame.data
                let last = window.lastReceived
                spool.queue.async { [self] in
                    write(data, at: at, of: id, to: spool, generation: generation, last: last)
                }
                return .none
            }
        }
    }

    private func failLocked(_ id: TransferID, _ code: TransferErrorCode, now: Date, _ state: inout State)
        -> ChunkOutcome
    {
        logger.notice("transfer \(id) fails: \(code)")
        guard let ended = endLocked(id, phase: .failed, error: code, now: now, &state) else { return .none }
        return .state(ended.state)
    }

    /// Writes a chunk (on the spool's queue), and syncs when the batch is full, the queue has
    /// nothing more, or it was the last: then acknowledges what is on stable storage.
    private func write(
        _ data: ByteBuffer, at offset: Int64, of id: TransferID, to spool: UploadSpool, generation: UInt64, last: Bool
    ) {
        // Chunks of an attachment that is no longer the transfer's are not written: the
        // client sends them again from what the host holds.
        let current = state.withLock { state -> Bool in
            spool.queued -= 1
            return state.attached[id]?.generation == generation
        }
        guard current else { return }
        do {
            try data.withUnsafeReadableBytes { try spool.file.write($0, at: offset) }
        } catch {
            logger.error("transfer \(id): \(error)")
            tellEnded(id, phase: .failed, error: .insufficientStorage)
            return
        }
        let count = Int64(data.readableBytes)
        if spool.hashed == offset {
            data.withUnsafeReadableBytes { spool.hasher.update(bufferPointer: $0) }
            spool.hashed += count
        } else {
            spool.hashed = -1
        }
        spool.unsynced += count
        let more = state.withLock { _ in spool.queued > 0 }
        guard last || !more || spool.unsynced >= syncBatchBytes else { return }
        do {
            try spool.file.sync()
        } catch {
            logger.error("transfer \(id): \(error)")
            tellEnded(id, phase: .failed, error: .insufficientStorage)
            return
        }
        spool.unsynced = 0
        synced(id, through: offset + count, spool: spool, generation: generation)
    }

    /// Bytes through `offset` are on stable storage: the table's offset moves (and is
    /// journaled: a restart resumes from it), the client is told with an `ack`, and a complete
    /// upload goes on to be checked. On the spool's queue.
    private func synced(_ id: TransferID, through offset: Int64, spool: UploadSpool, generation: UInt64) {
        let now = Date()
        let next = state.withLock { state -> (link: ConnectionLink, frame: HostFrame?, complete: UploadWindow?)? in
            if let moved = state.table.progressed(id, offset: offset, now: now) { unwrittenChange(moved, in: &state) }
            guard var attached = state.attached[id], attached.generation == generation, var window = attached.upload
            else { return nil }
            let (held, _) = window.synced(through: offset)
            if !window.isComplete { window.grant(uploadGrant(on: attached.connection, state)) }
            attached.upload = window
            state.attached[id] = attached
            let ack = AckFrame(
                transfer: id.uuid, offset: UInt64(held), window: window.isComplete ? 0 : UInt64(window.window))
            return (attached.link, .transfer(.ack(ack)), window.isComplete ? window : nil)
        }
        guard let next else { return }
        // The ack goes out once the journal holds the offset it says: after `kill -9` the host
        // resumes from the journal, and must hold at least every byte it acknowledged.
        afterJournal { [self] in
            if let frame = next.frame { next.link.run { $0.write(frame) } }
            if let window = next.complete {
                spool.queue.async { self.finish(id, window: window, spool: spool, link: next.link) }
            }
        }
    }

    // MARK: - Checking and handing over

    /// Every byte is in and synced: the size and digest are checked, and the file goes to its
    /// service. On the spool's queue.
    private func finish(_ id: TransferID, window: UploadWindow, spool: UploadSpool, link: ConnectionLink?) {
        let size = window.finalSize
        let verifying = state.withLock { state -> TransferRecord? in
            guard let record = state.table.moved(id, to: .verifying, now: Date()) else { return nil }
            unwrittenChange(record, in: &state)
            return record
        }
        guard let record = verifying else { return }
        if let link { link.run { $0.write(.transfer(.state(self.stateFrame(of: record)))) } }
        let digest: [UInt8]
        if spool.hashed == size {
            digest = Array(spool.hasher.finalize())
        } else if let read = Self.digest(of: spool.file, size: size) {
            digest = read
        } else {
            logger.error("transfer \(id): its spool file cannot be read back")
            tellEnded(id, phase: .failed, error: .serviceFailed)
            return
        }
        if let announced = window.announcedDigest, announced != digest {
            logger.notice("transfer \(id) fails: its bytes' SHA-256 is not the one its client sent")
            tellEnded(id, phase: .failed, error: .digestMismatch)
            return
        }
        // A file of unknown size, or resumed, may have bytes past its end from an earlier try.
        try? spool.file.truncate(to: size)
        let delivering = state.withLock { state -> TransferRecord? in
            guard let record = state.table.moved(id, to: .delivering, size: size, digest: digest, now: Date()) else {
                return nil
            }
            unwrittenChange(record, in: &state)
            return record
        }
        guard let delivering else { return }
        if let link { link.run { $0.write(.transfer(.state(self.stateFrame(of: delivering)))) } }
        deliver(delivering)
    }

    /// The SHA-256 of the first `size` bytes of `file`, read back (after a restart, or a resume
    /// that sent bytes again).
    static func digest(of file: SpoolFile, size: Int64) -> [UInt8]? {
        var hasher = SHA256()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var offset: Int64 = 0
        while offset < size {
            let want = Int(min(Int64(buffer.count), size - offset))
            let got = buffer.withUnsafeMutableBytes { pread(file.descriptor, $0.baseAddress, want, off_t(offset)) }
            if got < 0, errno == EINTR { continue }
            guard got > 0 else { return nil }
            buffer.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0.prefix(got))) }
            offset += Int64(got)
        }
        return Array(hasher.finalize())
    }

    /// Hands a checked upload to its service (again, after a restart or while it was away).
    func deliver(_ record: TransferRecord) {
        guard let hooks = hooks.withLock({ $0 }) else { return }
        let path = spoolFolder.appendingPathComponent("\(record.id).part").path
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else {
            logger.error(
                "transfer \(record.id): its file cannot be opened for its service: \(String(cString: strerror(errno)))")
            tellEnded(record.id, phase: .failed, error: .serviceFailed)
            return
        }
        let delivery = state.withLock { state -> UInt64? in
            guard !state.deliveries.values.contains(record.id) else { return nil }
            state.lastDelivery += 1
            state.deliveries[state.lastDelivery] = record.id
            return state.lastDelivery
        }
        guard let delivery else {
            close(descriptor)
            return
        }
        switch hooks.deliver(UploadDelivery(delivery: delivery, record: record, descriptor: descriptor)) {
        case .taken:
            logger.debug("transfer \(record.id) handed to \(record.package)")
        case .later(let why):
            close(descriptor)
            _ = state.withLock { $0.deliveries.removeValue(forKey: delivery) }
            logger.notice("transfer \(record.id) waits for its service: \(why)")
        case .refused(let why):
            close(descriptor)
            _ = state.withLock { $0.deliveries.removeValue(forKey: delivery) }
            logger.notice("transfer \(record.id) fails: \(why)")
            tellEnded(record.id, phase: .failed, error: .serviceFailed)
        }
    }

    /// Hands over again every checked upload whose service has not answered (at start, after a
    /// reload, and at each sweep), and checks again those a restart caught being checked.
    func deliverWaiting() {
        let waiting = state.withLock { state in
            state.table.all.filter {
                $0.direction == .upload && ($0.phase == .delivering || $0.phase == .verifying)
                    && !state.deliveries.values.contains($0.id)
            }
        }
        for record in waiting {
            if record.phase == .delivering {
                deliver(record)
                continue
            }
            // Caught being checked: its bytes are all synced (the journal's offset), so the check
            // starts again from the file.
            guard let spool = state.withLock({ $0.spools[record.id] }) ?? reopenSpool(record.id, held: -1) else {
                tellEnded(record.id, phase: .failed, error: .serviceFailed)
                continue
            }
            state.withLock { $0.spools[record.id] = spool }
            spool.queue.async { [self] in
                finish(
                    record.id, window: Self.completeWindow(size: record.offset, digest: nil), spool: spool, link: nil)
            }
        }
    }

    /// The window of an upload whose `size` bytes are all held.
    static func completeWindow(size: Int64, digest: [UInt8]?) -> UploadWindow {
        var window = UploadWindow(held: size, size: -1, maxSize: -1, window: 0)
        _ = window.chunk(offset: size, count: 0, last: true, digest: digest)
        return window
    }

    /// The service's answer to delivery `delivery`: the transfer completes (or fails) with
    /// `result`, and its spool file goes. The connection attached to it, if any, to be told.
    func delivered(
        _ delivery: UInt64, package: String, status: AppServiceResponseStatus, result: [UInt8]?, error: String?
    )
        -> Result<(link: ConnectionLink, state: TransferStateFrame)?, BackendCallError>
    {
        state.withLock { state in
            guard let id = state.deliveries[delivery], state.table.record(id)?.package == package else {
                return .failure(.unknownRequest)
            }
            state.deliveries[delivery] = nil
            let link = state.attached[id]?.link
            let phase: TransferPhase = status == .success ? .completed : .failed
            guard
                let ended = endLocked(
                    id, phase: phase, error: status == .success ? nil : .serviceFailed, result: result, now: Date(),
                    &state)
            else { return .success(nil) }
            logger.debug(
                "transfer \(id) \(phase.rawValue): its service answered \(status)\(error.map { ": \(untrusted($0, limit: 200))" } ?? "")"
            )
            return .success(link.map { ($0, ended.state) })
        }
    }

    // MARK: - Inside

    /// Ends transfer `id` from one of its queues, and tells the connection attached to it.
    func tellEnded(_ id: TransferID, phase: TransferPhase, error: TransferErrorCode) {
        if let (link, state) = end(id, phase: phase, error: error) {
            link.run { $0.write(.transfer(.state(state))) }
        }
    }

    /// Closes and deletes an upload's spool file, on its queue (after what it still writes).
    func discardSpool(_ id: TransferID, _ state: inout State) {
        let folder = spoolFolder
        if let spool = state.spools.removeValue(forKey: id) {
            spool.queue.async {
                spool.file.close()
                SpoolFile.remove(id, in: folder)
            }
        } else {
            SpoolFile.remove(id, in: folder)
        }
    }

    func notifyEnded(_ record: TransferRecord, _ why: String) {
        hooks.withLock { $0 }?.ended(record, why)
    }
}
