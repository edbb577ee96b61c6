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
/// digest run on its own serial queue, in the order the chunks came; the counts marked below
/// are kept under the service's lock. The file is open only while the upload is attached or
/// being checked; the digest of the bytes so far stays while it waits.
final class UploadSpool: @unchecked Sendable {
    let queue: DispatchQueue
    // On `queue` only (or before the spool is shared):
    var file: SpoolFile?
    /// The SHA-256 of the bytes from 0 to `hashed`; `hashed` is -1 once a write went anywhere
    /// but its end (a resumed upload sent again what was written and not synced): the digest
    /// is then read back from the file at the end.
    var hasher = SHA256()
    var hashed: Int64
    /// Bytes written since the last sync, and where the last write ended and for which
    /// attachment (what a sync that waited acknowledges).
    var unsynced: Int64 = 0
    var writtenEnd: Int64 = 0
    var writtenGeneration: UInt64 = 0
    /// Whether a sync is due shortly, should nothing more come (``TransferService/syncDelay``).
    var syncDue = false
    // Under the service's lock:
    /// Chunks handed to `queue` and not written yet, and their bytes (bounded: a client cannot
    /// make the host hold more than two windows of an upload, whatever it attaches).
    var queued = 0
    var queuedBytes: Int64 = 0
    /// Whether `file` is open, or being opened, on `queue`.
    var isOpen = false

    init(id: TransferID, file: SpoolFile?, fresh: Bool) {
        queue = DispatchQueue(label: "atriumd.transfers.upload.\(id)")
        self.file = file
        isOpen = file != nil
        hashed = fresh ? 0 : -1
    }
}

/// A finished upload handed to its service.
struct UploadDelivery: Sendable {
    var delivery: UInt64
    var transfer: TransferID
    /// The file, open for reading: the service's to close once it takes it (``DeliveryVerdict/taken``).
    var descriptor: Int32
    var size: Int64
    var digest: [UInt8]
    /// The name the service gave when it accepted the upload.
    var name: String?
    var package: String
    var service: String

    init(delivery: UInt64, record: TransferRecord, descriptor: Int32) {
        self.init(
            delivery: delivery, transfer: record.id, descriptor: descriptor, size: record.size,
            digest: record.digest ?? [], name: record.name, package: record.package, service: record.service)
    }

    init(
        delivery: UInt64, transfer: TransferID, descriptor: Int32, size: Int64, digest: [UInt8], name: String?,
        package: String, service: String
    ) {
        self.delivery = delivery
        self.transfer = transfer
        self.descriptor = descriptor
        self.size = size
        self.digest = digest
        self.name = name
        self.package = package
        self.service = service
    }
}

/// What handing an upload to its service came to. The descriptor is the service's only when it
/// took the upload; otherwise it stays the host's, which closes it.
enum DeliveryVerdict: Sendable {
    /// The service has it; its answer comes through ``TransferService/delivered(_:package:status:result:error:)``.
    case taken
    /// The service is not there now (its package failed, or is being reloaded): tried again later.
    case later(String)
    /// The service takes no uploads: the transfer fails.
    case refused(String)
}

extension TransferService {
    /// The most bytes written to an upload's spool between two syncs: a sync, then an `ack`,
    /// at least every half window (the client sends the other half meanwhile), and whenever
    /// the chunks written so far are all the client has sent.
    var syncBatchBytes: Int64 { max(limits.windowBytes / 2, 1) }

    // MARK: - Accepting

    /// A service accepts an upload of `size` bytes (-1: not known, then at most `maxSize`, or
    /// the host's limits when that is -1) from the caller of the request it is answering. Its
    /// space is reserved, and its record is on stable storage, before its id is returned.
    func accept(size: Int64, maxSize: Int64, name: String?, for maker: Maker) -> Result<TransferID, OfferRefusal> {
        guard journal != nil else { return .failure(.unavailable(unavailable ?? "the host cannot keep transfers")) }
        guard size >= -1, maxSize >= -1 else { return .failure(.invalid("a size or a maximum below -1")) }
        let record = TransferRecord(
            owner: maker.owner, direction: .upload, package: maker.package, service: maker.service,
            name: name.map { Self.displayName($0) }, size: size, maxSize: maxSize, now: Date())
        let added = state.withLock { $0.table.add(record) }
        let made: TransferRecord
        switch added {
        case .success(let record): made = record
        case .failure(.invalid(let problem)): return .failure(.invalid(problem))
        case .failure(let refusal):
            logger.notice("upload refused: \(refusal)", metadata: ["package": "\(maker.package)"])
            return .failure(.limit(refusal))
        }
        // The spool file, its space reserved, outside the lock: a disk that cannot hold it
        // refuses now, not at 90%. It is closed until the client attaches.
        do {
            let file = try SpoolFile.open(
                made.id, in: spoolFolder, reserve: size > 0 ? size : nil, floor: limits.freeSpaceFloorBytes)
            file.close()
            // On the journal's queue, after any change already waiting (a revocation that removed
            // it, say): its line never comes after its removal's.
            try writeNow(made)
        } catch {
            _ = state.withLock { $0.table.remove(made.id) }
            SpoolFile.remove(made.id, in: spoolFolder)
            logger.notice("upload refused: \(error)", metadata: ["package": "\(maker.package)"])
            return .failure(.storage("\(error)"))
        }
        state.withLock { state in
            state.spools[made.id] = UploadSpool(id: made.id, file: nil, fresh: true)
        }
        logger.debug("transfer \(made.id) made: \(maker.package) accepts \(size) bytes from \(maker.owner)")
        return .success(made.id)
    }

    /// A name from a service (a client's, often): kept as it is, for the service to get back
    /// and the client to show, but cut to 1,024 bytes at a character's end.
    static func displayName(_ name: String) -> String {
        guard name.utf8.count > 1024 else { return name }
        var cut = ""
        for character in name {
            guard cut.utf8.count + character.utf8.count <= 1024 else { break }
            cut.append(character)
        }
        return cut
    }

    /// Puts an opened spool file in place for transfer `id` (an attach opened it, outside the
    /// lock); one opened meanwhile by another attach wins, and this one is closed.
    func install(_ file: SpoolFile, held: Int64, for id: TransferID, _ state: inout State) {
        guard let spool = state.spools[id] else {
            state.spools[id] = UploadSpool(id: id, file: file, fresh: held == 0)
            return
        }
        guard !spool.isOpen else {
            spool.queue.async { file.close() }
            return
        }
        spool.isOpen = true
        spool.queue.async { spool.file = file }
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

    /// `waits`: whether the sender sends nothing more until this chunk is acknowledged (an HTTP
    /// request knows; for a frames client, nil: it has filled its window): the spool then syncs
    /// as soon as it has written what it was sent. Otherwise it syncs each half window, or once
    /// nothing more has come for ``syncDelay`` (a client that waits for each ack of its own
    /// accord is acknowledged that much later, never left waiting).
    func chunk(_ frame: ChunkFrame, owner: TransferOwner, connection: UInt64, waits: Bool? = nil) -> ChunkOutcome {
        let id = TransferID(frame.transfer)
        let now = Date()
        return state.withLock { state in
            guard let record = state.table.find(id, owner: owner), record.phase == .running,
                var attached = state.attached[id], attached.connection == connection, var window = attached.upload,
                let spool = state.spools[id]
            else { return .none }
            state.movedSinceLook = true
            let count = frame.data.readableBytes
            // An empty chunk that ends nothing moves nothing: not worth a write, a sync or a turn.
            guard count > 0 || frame.last else { return .none }
            // At most a chunk's bytes, and never more queued than two windows (an attachment's
            // and one it replaced whose bytes still wait for the disk).
            guard count <= limits.chunkBytes, spool.queuedBytes <= 2 * limits.windowBytes - Int64(count) else {
                let waiting = detachLocked(id, from: connection, error: .windowExceeded, &state) ?? record
                return .state(stateFrame(of: waiting))
            }
            // Offsets are at most Int64.max (the frame's check).
            let offset = Int64(frame.offset)
            switch window.chunk(offset: offset, count: count, last: frame.last, digest: frame.digest) {
            case .ignore:
                return .none
            case .refuse(let code):
                let waiting = detachLocked(id, from: connection, error: code, &state) ?? record
                return .state(stateFrame(of: waiting))
            case .fail(let code):
                return failLocked(id, code, now: now, &state)
            case .write(let at):
                // An upload of unknown size grows within the spool's limits.
                if record.size < 0, !state.table.mayGrow(id, to: at + Int64(count)) {
                    return failLocked(id, .insufficientStorage, now: now, &state)
                }
                attached.upload = window
                state.attached[id] = attached
                spool.queued += 1
                spool.queuedBytes += Int64(count)
                let generation = attached.generation
                // A small slice of a large read buffer would keep the whole buffer: copied.
                var data = frame.data
                if data.storageCapacity > 2 * data.readableBytes + 4096 {
                    data = ByteBuffer(bytes: data.readableBytesView)
                }
                let last = window.lastReceived
                let unknownSize = record.size < 0
                let waits = waits ?? (window.window - (window.written - window.held) < Int64(limits.chunkBytes))
                spool.queue.async { [self, data] in
                    write(
                        data, at: at, of: id, to: spool, generation: generation, last: last, waits: waits,
                        unknownSize: unknownSize)
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
        _ data: ByteBuffer, at offset: Int64, of id: TransferID, to spool: UploadSpool, generation: UInt64,
        last: Bool, waits: Bool, unknownSize: Bool
    ) {
        let count = Int64(data.readableBytes)
        // Chunks of an attachment that is no longer the transfer's are not written: the
        // client sends them again from what the host holds.
        let current = state.withLock { state -> Bool in
            spool.queued -= 1
            spool.queuedBytes -= count
            return state.attached[id]?.generation == generation && state.table.record(id)?.phase == .running
        }
        guard current, let file = spool.file else { return }
        // An upload of unknown size reserved nothing: the free-space floor is checked as it grows.
        if unknownSize, limits.freeSpaceFloorBytes > 0, let free = SpoolFile.freeBytes(of: spoolFolder),
            free - count < limits.freeSpaceFloorBytes
        {
            logger.notice(
                "transfer \(id) fails: the disk has \(free) bytes free, and keeps \(limits.freeSpaceFloorBytes)")
            tellEnded(id, phase: .failed, error: .insufficientStorage)
            return
        }
        do {
            try data.withUnsafeReadableBytes { try file.write($0, at: offset) }
        } catch {
            logger.error("transfer \(id): \(error)")
            tellEnded(id, phase: .failed, error: .insufficientStorage)
            return
        }
        if spool.hashed == offset {
            data.withUnsafeReadableBytes { spool.hasher.update(bufferPointer: $0) }
            spool.hashed += count
        } else {
            spool.hashed = -1
        }
        spool.unsynced += count
        spool.writtenEnd = offset + count
        spool.writtenGeneration = generation
        let more = state.withLock { _ in spool.queued > 0 }
        guard last || (waits && !more) || spool.unsynced >= syncBatchBytes else {
            if !more { syncSoon(id, spool: spool) }
            return
        }
        sync(id, spool: spool)
    }

    /// How long written bytes wait for more before they are synced and acknowledged anyway.
    static let syncDelay = DispatchTimeInterval.milliseconds(2)

    /// Syncs what was written once ``syncDelay`` has passed with nothing more written. On the
    /// spool's queue.
    private func syncSoon(_ id: TransferID, spool: UploadSpool) {
        guard !spool.syncDue else { return }
        spool.syncDue = true
        let written = spool.writtenEnd
        spool.queue.asyncAfter(deadline: .now() + Self.syncDelay) { [self] in
            spool.syncDue = false
            guard spool.unsynced > 0 else { return }
            // More came meanwhile: its own write decides (or schedules) the next sync.
            guard spool.writtenEnd == written, state.withLock({ _ in spool.queued == 0 }) else {
                if spool.writtenEnd != written, state.withLock({ _ in spool.queued == 0 }) {
                    syncSoon(id, spool: spool)
                }
                return
            }
            let current = state.withLock { state in
                state.attached[id]?.generation == spool.writtenGeneration && state.table.record(id)?.phase == .running
            }
            guard current else { return }
            sync(id, spool: spool)
        }
    }

    /// Syncs the spool file and acknowledges what it holds. On the spool's queue.
    private func sync(_ id: TransferID, spool: UploadSpool) {
        guard let file = spool.file else { return }
        do {
            try file.sync()
        } catch {
            logger.error("transfer \(id): \(error)")
            tellEnded(id, phase: .failed, error: .insufficientStorage)
            return
        }
        spool.unsynced = 0
        synced(id, through: spool.writtenEnd, spool: spool, generation: spool.writtenGeneration)
    }

    /// Bytes through `offset` are on stable storage: the table's offset moves (and is
    /// journaled: a restart resumes from it), the client is told with an `ack` once the journal
    /// holds it, and a complete upload moves to `verifying` at once (nothing more is taken for
    /// it) and goes on to be checked. On the spool's queue.
    private func synced(_ id: TransferID, through offset: Int64, spool: UploadSpool, generation: UInt64) {
        let now = Date()
        let next = state.withLock {
            state -> (link: TransferPeer, ack: AckFrame, complete: (size: Int64, state: TransferStateFrame)?)? in
            if let moved = state.table.progressed(id, offset: offset, now: now) { unwrittenChange(moved, in: &state) }
            guard var attached = state.attached[id], attached.generation == generation, var window = attached.upload
            else { return nil }
            let (held, _) = window.synced(through: offset)
            guard window.isComplete else {
                window.grant(uploadGrant(on: attached.connection, state))
                attached.upload = window
                state.attached[id] = attached
                return (
                    attached.link, AckFrame(transfer: id.uuid, offset: UInt64(held), window: UInt64(window.window)),
                    nil
                )
            }
            // Every byte is in: from here the upload takes no chunk, no cancel, and no second check.
            guard
                let verifying = state.table.moved(
                    id, to: .verifying, from: [.running], clientDigest: window.announcedDigest, now: now)
            else { return nil }
            unwrittenChange(verifying, in: &state)
            attached.upload = nil
            state.attached[id] = attached
            state.finishing.insert(id)
            return (
                attached.link, AckFrame(transfer: id.uuid, offset: UInt64(held), window: 0),
                (window.finalSize, stateFrame(of: verifying))
            )
        }
        guard let next else { return }
        // The ack goes out once the journal holds the offset it says: after `kill -9` the host
        // resumes from the journal, and must hold at least every byte it acknowledged. A journal
        // that could not be written fails the upload rather than promise what is not on disk.
        afterJournal(of: id) { [self] written in
            if !written {
                logger.error("transfer \(id) fails: its journal could not be written")
                tellEnded(id, phase: .failed, error: .insufficientStorage)
                return
            }
            next.link.tell(.ack(next.ack))
            if let (size, verifying) = next.complete {
                next.link.tell(.state(verifying))
                spool.queue.async { self.finish(id, size: size, spool: spool, link: next.link) }
            }
        }
    }

    // MARK: - Checking and handing over

    /// Every byte is in and synced: the size and digest are checked, and the file goes to its
    /// service. On the spool's queue; the upload is `verifying`, in ``State/finishing``.
    private func finish(_ id: TransferID, size: Int64, spool: UploadSpool, link: TransferPeer?) {
        guard let file = spool.file, let record = state.withLock({ $0.table.record(id) }), record.phase == .verifying
        else {
            _ = state.withLock { $0.finishing.remove(id) }
            return
        }
        let digest: [UInt8]
        if spool.hashed == size {
            digest = Array(spool.hasher.finalize())
        } else if let read = Self.digest(of: file, size: size) {
            digest = read
        } else {
            logger.error("transfer \(id): its spool file cannot be read back")
            tellEnded(id, phase: .failed, error: .serviceFailed)
            return
        }
        if let announced = record.clientDigest, announced != digest {
            logger.notice("transfer \(id) fails: its bytes' SHA-256 is not the one its client sent")
            tellEnded(id, phase: .failed, error: .digestMismatch)
            return
        }
        do {
            // A file of unknown size, or resumed, may have bytes past its end from an earlier try.
            try file.truncate(to: size)
            try file.sync()
        } catch {
            logger.error("transfer \(id): \(error)")
            tellEnded(id, phase: .failed, error: .serviceFailed)
            return
        }
        // The service gets a descriptor of its own, on the file that was checked.
        let descriptor = open("/proc/self/fd/\(file.descriptor)", O_RDONLY | O_CLOEXEC)
        let delivering = state.withLock { state -> TransferRecord? in
            state.finishing.remove(id)
            guard
                let record = state.table.moved(
                    id, to: .delivering, from: [.verifying], size: size, digest: digest, now: Date())
            else { return nil }
            unwrittenChange(record, in: &state)
            return record
        }
        guard let delivering, descriptor >= 0 else {
            if descriptor >= 0 { close(descriptor) } else { tellEnded(id, phase: .failed, error: .serviceFailed) }
            return
        }
        if let link { tell(stateFrame(of: delivering), to: link) }
        deliver(delivering, descriptor: descriptor)
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

    /// Hands a checked upload to its service, with `descriptor` (the host's until the service
    /// takes it); again after a restart or while the service was away.
    func deliver(_ record: TransferRecord, descriptor: Int32) {
        guard let hooks = hooks.withLock({ $0 }) else {
            close(descriptor)
            return
        }
        let delivery = state.withLock { state -> UInt64? in
            guard state.table.record(record.id)?.phase == .delivering, !state.deliveries.values.contains(record.id)
            else { return nil }
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

    /// A delivery the service will never answer (it was stopped before it took the file):
    /// forgotten, so that the upload is handed over again.
    func deliveryDropped(_ delivery: UInt64) {
        _ = state.withLock { $0.deliveries.removeValue(forKey: delivery) }
    }

    /// Deliveries to `package` that will never be answered (its worker was restarted): forgotten,
    /// and handed over again.
    func deliveriesLost(of package: String) {
        state.withLock { state in
            for (delivery, id) in state.deliveries where state.table.record(id)?.package == package {
                state.deliveries[delivery] = nil
            }
        }
        deliverWaiting()
    }

    /// Hands over again every checked upload whose service has not answered (at start, after a
    /// reload, and at each sweep), and checks again those a restart caught being checked.
    func deliverWaiting() {
        let waiting = state.withLock { state in
            state.table.all.filter {
                $0.direction == .upload && ($0.phase == .delivering || $0.phase == .verifying)
                    && !state.deliveries.values.contains($0.id) && !state.finishing.contains($0.id)
            }
        }
        for record in waiting {
            let path = spoolFolder.appendingPathComponent("\(record.id).part").path
            if record.phase == .delivering {
                // The file the service may have linked already: opened by its name, read only.
                let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
                var status = stat()
                guard descriptor >= 0, fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
                    if descriptor >= 0 { close(descriptor) }
                    logger.error("transfer \(record.id) fails: its checked file is gone from the spool")
                    tellEnded(record.id, phase: .failed, error: .serviceFailed)
                    continue
                }
                deliver(record, descriptor: descriptor)
                continue
            }
            // Caught being checked: its bytes are all synced (the journal's offset), so the check
            // starts again from the file, against the digest its client sent (journaled).
            let size = record.size >= 0 ? record.size : record.offset
            guard let file = try? SpoolFile.reopen(record.id, in: spoolFolder, held: size) else {
                logger.error("transfer \(record.id) fails: its spool file cannot be opened again")
                tellEnded(record.id, phase: .failed, error: .serviceFailed)
                continue
            }
            let spool = UploadSpool(id: record.id, file: file, fresh: false)
            let claimed = state.withLock { state -> Bool in
                guard state.table.record(record.id)?.phase == .verifying, state.finishing.insert(record.id).inserted
                else { return false }
                state.spools[record.id] = spool
                return true
            }
            guard claimed else {
                file.close()
                continue
            }
            spool.queue.async { [self] in finish(record.id, size: size, spool: spool, link: nil) }
        }
    }

    /// The service's answer to delivery `delivery`: the transfer completes (or fails) with
    /// `result`, and its spool file goes. The connection attached to it, if any, to be told.
    func delivered(
        _ delivery: UInt64, package: String, status: AppServiceResponseStatus, result: [UInt8]?, error: String?
    )
        -> Result<(link: TransferPeer, state: TransferStateFrame)?, BackendCallError>
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
        _ = state.withLock { $0.finishing.remove(id) }
        if let (link, state) = end(id, phase: phase, error: error) {
            tell(state, to: link)
        }
    }

    /// Closes an upload's spool file, on its queue (after what it still writes), and deletes it
    /// (a download has none). A completed upload's goes once the journal holds its completion:
    /// a host stopped before then finds it still being handed to its service, its file there to
    /// hand over again (not failed as one whose file is gone, after its client was told it
    /// completed); when the journal cannot write it, the file stays, and goes at the next start.
    /// Any other's goes at once, so that a full disk gets its space back: after a restart, an
    /// upload the journal still had unfinished fails for want of its file, as it was told.
    func discardSpool(of record: TransferRecord, _ state: inout State) {
        guard record.direction == .upload else { return }
        let id = record.id
        let folder = spoolFolder
        state.finishing.remove(id)
        let spool = state.spools.removeValue(forKey: id)
        let discard: @Sendable (_ remove: Bool) -> Void = { remove in
            guard let spool else {
                if remove { SpoolFile.remove(id, in: folder) }
                return
            }
            spool.queue.async {
                spool.file?.close()
                spool.file = nil
                if remove { SpoolFile.remove(id, in: folder) }
            }
        }
        guard record.phase == .completed else { return discard(true) }
        afterJournalLocked(of: id, &state, discard)
    }

    func notifyEnded(_ record: TransferRecord, _ why: String) {
        hooks.withLock { $0 }?.ended(record, why)
    }
}
