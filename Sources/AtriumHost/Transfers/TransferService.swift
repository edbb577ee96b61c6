import AtriumProtocol
import AtriumTransfers
import AtriumValues
import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// The host's transfers (CONTRACT section 8): the table of ``AtriumTransfers`` under one lock,
/// its journal on disk, the files downloads read, and which connection moves each transfer's
/// bytes now. Connections hand it their transfer frames and write what it returns; they hold
/// no transfer state of their own. Services make transfers through it while they answer a
/// request (``offer(_:name:for:)``).
///
/// Every call may come from any thread. The lock is held only for the table's work, never
/// for disk I/O: the journal is written on a queue of its own, in the order of the changes
/// (``journal(_:)``), and downloads are read on the service's thread pool.
final class TransferService: Sendable {
    let limits: TransferLimits
    let logger: Logger
    /// Where the journal and the spool are (`STATE/transfers`).
    let folder: URL
    /// Why transfers cannot be made on this host (its folder cannot be made), or nil.
    let unavailable: String?
    /// Downloads are read here, off the event loops.
    let pool: NIOThreadPool
    let journal: TransferJournal?
    let state: Mutex<State>
    /// Partial uploads, `ID.part`, in the transfers' folder's `spool`.
    let spoolFolder: URL
    /// What the host does for the service: hand it a finished upload, tell it a transfer ended.
    let hooks = Mutex<Hooks?>(nil)
    private let journalQueue = DispatchQueue(label: "atriumd.transfers.journal")
    /// The transfers' folder's lock, held while the host runs (closed with the process).
    private let folderLock: Int32?
    /// The connections speaking HTTP now (`--transfer-http-connections`), and their channels
    /// (closed at shutdown: they are not the core's connections).
    let httpConnections = Atomic<Int>(0)
    let httpChannels = Mutex<[ObjectIdentifier: any Channel]>([:])

    /// Who made a transfer, and for whom: what a service's offer names.
    struct Maker: Sendable {
        var owner: TransferOwner
        var package: String
        var service: String
        /// The request asked for the download it starts to be attached at once.
        var attachWanted = false
    }

    /// A transfer attached to a connection, and its bytes' window there.
    struct Attached {
        var connection: UInt64
        var link: TransferPeer
        var download: DownloadWindow?
        var upload: UploadWindow?
        /// Which attachment this is: an upload's writes queued by an earlier one are dropped.
        var generation: UInt64 = 0
    }

    /// What the host does for the services, set once it is up.
    struct Hooks: Sendable {
        /// Hands a finished upload to its service; says whether the service took it, or why not.
        var deliver: @Sendable (UploadDelivery) -> DeliveryVerdict
        /// Tells a service that a transfer it made ended before reaching it.
        var ended: @Sendable (TransferRecord, String) -> Void
    }

    struct State {
        var table: TransferTable
        /// The files of downloads, open while the transfer is unfinished (opened again after a
        /// restart when the client attaches).
        var files: [TransferID: DownloadFile] = [:]
        var attached: [TransferID: Attached] = [:]
        /// Each connection's attached transfers, in the order its chunks take turns.
        var byConnection: [UInt64: [TransferID]] = [:]
        /// Records changed and not yet written to the journal (nil: to be removed), and
        /// whether the journal's queue is writing them.
        var unwritten: [TransferID: TransferRecord?] = [:]
        var writing = false
        /// A retry of a failed journal write is scheduled.
        var retrying = false
        /// Unfinished uploads' spool files.
        var spools: [TransferID: UploadSpool] = [:]
        /// Uploads handed to their service and not answered yet, by delivery id.
        var deliveries: [UInt64: TransferID] = [:]
        var lastDelivery: UInt64 = 0
        var lastGeneration: UInt64 = 0
        /// Uploads being checked (their spool file stays open until they are handed over).
        var finishing: Set<TransferID> = []
        /// Transfers whose last journal write failed: what was promised of them is not on disk.
        var journalFailed: Set<TransferID> = []
        /// Bytes moved since ``wentQuietAfterMoving()`` last looked, and at the look before.
        var movedSinceLook = false
        var wasMoving = false
        /// The transfers whose changes the journal is writing now.
        var committing: Set<TransferID> = []
        /// What waits for the journal's next batch (``afterJournal(of:paced:_:)``), in order.
        var waitingForBatch: [(id: TransferID, body: @Sendable (_ written: Bool) -> Void)] = []
        /// The change number the journal's floor file promises to stay above.
        var sequenceFloor: UInt64 = 0
    }

    init(folder: URL, limits: TransferLimits, logger: Logger) {
        self.folder = folder
        spoolFolder = folder.appendingPathComponent("spool")
        self.limits = limits
        self.logger = logger
        pool = NIOThreadPool(numberOfThreads: 2)
        pool.start()
        var journal: TransferJournal?
        var folderLock: Int32?
        var unavailable: String?
        var records: [TransferRecord] = []
        var floor: UInt64 = 0
        var unread = false
        do {
            try FileManager.default.createDirectory(
                at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            // Before the journal is read: another host's unfinished write is not cut off.
            folderLock = try TransferJournal.lock(folder)
            let made = try TransferJournal(folder: folder.appendingPathComponent("journal"))
            try FileManager.default.createDirectory(
                at: spoolFolder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            // The callers' bytes are theirs, whoever made the folders first.
            for made in [folder, spoolFolder] where chmod(made.path, 0o700) != 0 {
                throw TransferStorageError("cannot make \(made.path) private: \(String(cString: strerror(errno)))")
            }
            let read = try made.readAll()
            for problem in read.problems { logger.warning("transfers' journal: \(problem)") }
            unread = !read.problems.isEmpty
            records = read.records
            floor = made.readFloor()
            journal = made
        } catch {
            unavailable = "the host cannot keep transfers: \(error)"
            logger.error("\(unavailable!)")
        }
        self.journal = journal
        self.folderLock = folderLock
        self.unavailable = unavailable
        let table = TransferTable(limits: limits, records: records, sequenceFloor: floor)
        for (id, problem) in table.rejected {
            logger.warning("transfers' journal: transfer \(id) is left out: \(problem)")
        }
        var initial = State(table: table)
        initial.sequenceFloor = floor
        state = Mutex(initial)
        if !records.isEmpty { logger.info("transfers: \(table.count) kept from the journal") }
        // Only when the journal was read whole: a record it holds and the host could not read or
        // take (written by another version, say) keeps its file.
        if journal != nil, !unread, table.rejected.isEmpty { removeStraySpoolFiles(keeping: table) }
    }

    /// Removes the spool files of uploads the journal does not hold unfinished: an ended
    /// upload's file is removed only once its end is journaled, so a host stopped between the
    /// two, or whose journal could not write the end, leaves it behind.
    private func removeStraySpoolFiles(keeping table: TransferTable) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: spoolFolder.path)) ?? []
        for name in names where name.hasSuffix(".part") {
            if let id = TransferID(String(name.dropLast(5))), let record = table.record(id),
                record.direction == .upload, !record.phase.isEnded
            {
                continue
            }
            logger.notice("transfers: \(name) in the spool belongs to no unfinished upload; removed")
            unlink(spoolFolder.appendingPathComponent(name).path)
        }
    }

    func shutdown() {
        pool.shutdownGracefully { _ in }
        journalQueue.sync { while writeJournalBatch() {} }
    }

    // MARK: - Making a transfer

    /// A service offers the file open as `descriptor` (its own, which it keeps) to the caller of
    /// the request it is answering: a download, whose id goes in the answer as `Transfer`.
    func offer(_ descriptor: Int32, name: String?, for maker: Maker) -> Result<TransferID, OfferRefusal> {
        if let unavailable { return .failure(.unavailable(unavailable)) }
        let file: DownloadFile
        do { file = try DownloadFile.offered(descriptor) } catch { return .failure(.file(error)) }
        let record = TransferRecord(
            owner: maker.owner, direction: .download, package: maker.package, service: maker.service,
            name: name.map { Self.displayName($0) }, size: file.source.size, source: file.source, now: Date())
        let added = state.withLock { state -> Result<TransferRecord, TransferTable.Refusal> in
            let added = state.table.add(record)
            if case .success(let record) = added {
                state.files[record.id] = file
                unwrittenChange(record, in: &state)
            }
            return added
        }
        switch added {
        case .success(let record):
            logger.debug(
                "transfer \(record.id) made: \(maker.package) offers \(record.size) bytes to \(maker.owner)")
            return .success(record.id)
        case .failure(let refusal):
            logger.notice("transfer refused: \(refusal)", metadata: ["package": "\(maker.package)"])
            return .failure(.limit(refusal))
        }
    }

    /// Why a service's offer was refused.
    enum OfferRefusal: Error, CustomStringConvertible {
        case unavailable(String)
        /// A size or a maximum that cannot be.
        case invalid(String)
        /// The disk cannot hold the upload, or keep the host's free-space floor.
        case storage(String)
        case file(DownloadFile.Refusal)
        case limit(TransferTable.Refusal)
        /// The request is not one the service is answering now.
        case unknownRequest

        /// The name a refusal travels under between a worker and the host.
        var name: String {
            switch self {
            case .unavailable: "unavailable"
            case .invalid: "invalid"
            case .storage: "storage"
            case .file: "file"
            case .limit: "limit"
            case .unknownRequest: "unknownRequest"
            }
        }

        /// A refusal from its name and reason (a worker's side of a host's refusal).
        init(name: String, reason: String) {
            switch name {
            case "invalid", "file": self = .invalid(reason)
            case "storage", "limit": self = .storage(reason)
            case "unknownRequest": self = .unknownRequest
            default: self = .unavailable(reason)
            }
        }

        var description: String {
            switch self {
            case .unavailable(let reason), .storage(let reason): reason
            case .invalid(let reason): "not an upload the host can take: \(reason)"
            case .file(let refusal): "the file cannot be offered: \(refusal)"
            case .limit(let refusal): "\(refusal)"
            case .unknownRequest: "no such request waits for the service's answer"
            }
        }
    }

    // MARK: - Attaching

    /// What an `attach` leads to: the answer, and the connection the transfer was taken from
    /// (to be told `attachedElsewhere`).
    struct AttachOutcome {
        var answer: AttachedFrame
        var displaced: (link: TransferPeer, state: TransferStateFrame)?
        /// Whether bytes may move now (a download to send).
        var sends = false
    }

    /// What an attach must open first, outside the lock.
    private enum Opening {
        case nothing
        case download(DownloadSource)
        case upload(held: Int64)
    }

    func attach(_ frame: AttachFrame, owner: TransferOwner, peer link: TransferPeer, connection: UInt64)
        -> AttachOutcome
    {
        let id = TransferID(frame.transfer)
        // Files are open only while their transfer is attached: a download's is opened again
        // (only if unchanged), an upload's spool file (only if it holds every byte acknowledged).
        let opening = state.withLock { state -> Opening in
            guard let record = state.table.find(id, owner: owner), !record.phase.isEnded else { return .nothing }
            switch record.direction {
            case .download:
                return state.files[id] == nil ? record.source.map { .download($0) } ?? .nothing : .nothing
            case .upload:
                guard record.phase == .waiting || record.phase == .running, state.spools[id]?.isOpen != true else {
                    return .nothing
                }
                return .upload(held: record.offset)
            }
        }
        var file: DownloadFile?
        var spoolFile: SpoolFile?
        var failure: (TransferErrorCode, String)?
        switch opening {
        case .nothing: break
        case .download(let source):
            do { file = try DownloadFile.reopen(source) } catch {
                failure = (.changed, "its file cannot be opened again: \(error)")
            }
        case .upload(let held):
            do { spoolFile = try SpoolFile.reopen(id, in: spoolFolder, held: held) } catch {
                failure = (.serviceFailed, "its spool file cannot be opened again: \(error)")
            }
        }
        let now = Date()
        return state.withLock { state in
            // What was opened for a transfer that ended meanwhile (a cancel, the sweep) is closed.
            let unfinished = state.table.find(id, owner: owner).map { !$0.phase.isEnded } ?? false
            if let file, unfinished, state.files[id] == nil { state.files[id] = file }
            if let spoolFile, case .upload(let held) = opening {
                if unfinished { install(spoolFile, held: held, for: id, &state) } else { spoolFile.close() }
            }
            if let (code, why) = failure, state.table.find(id, owner: owner)?.phase.isEnded == false {
                logger.notice("transfer \(id) fails: \(why)")
                _ = endLocked(id, phase: .failed, error: code, now: now, &state)
            }
            return attachLocked(frame, id: id, owner: owner, link: link, connection: connection, now: now, &state)
        }
    }

    func attachLocked(
        _ frame: AttachFrame, id: TransferID, owner: TransferOwner, link: TransferPeer, connection: UInt64,
        now: Date, _ state: inout State
    ) -> AttachOutcome {
        func refused(_ status: AppServiceResponseStatus, _ error: String, _ record: TransferRecord? = nil)
            -> AttachOutcome
        {
            AttachOutcome(
                answer: AttachedFrame(
                    id: frame.id, transfer: frame.transfer, status: status,
                    direction: record?.direction.rawValue ?? "download", size: record?.size ?? -1,
                    offset: UInt64(max(record?.offset ?? 0, 0)), chunkBytes: UInt64(limits.chunkBytes), window: 0,
                    expires: Timestamp(now), name: record?.name, digest: record?.digest, error: error))
        }
        // An offset past the end is checked before the attach takes the transfer anywhere.
        if let record = state.table.find(id, owner: owner), record.direction == .download, !record.phase.isEnded,
            let offset = frame.offset, offset > UInt64(record.size)
        {
            return refused(.failure, TransferErrorCode.offsetMismatch.rawValue, record)
        }
        switch state.table.attach(id, owner: owner, connection: connection, now: now) {
        case .failure(.notFound):
            return refused(.failure, TransferErrorCode.notFound.rawValue)
        case .failure(.ended(let record)):
            return refused(.failure, TransferErrorCode.ended.rawValue, record)
        case .failure(.tooManyOnConnection(let limit)):
            return refused(.resourceLimitsExceeded, "this connection has \(limit) transfers attached, its limit")
        case .failure(.tooManyOfCaller(let limit)):
            return refused(.resourceLimitsExceeded, "this caller has \(limit) transfers attached, its limit")
        case .success(let attachment):
            let record = attachment.record
            unwrittenChange(record, in: &state)
            var outcome = refused(.success, "")
            if let previous = state.attached[id], previous.connection != connection {
                removeFromConnection(id, previous.connection, &state)
                outcome.displaced = (
                    previous.link,
                    stateFrame(of: record, phase: .waiting, error: .attachedElsewhere)
                )
            }
            var window: UInt64 = 0
            var download: DownloadWindow?
            var upload: UploadWindow?
            if record.direction == .upload, record.phase == .running {
                if state.attached[id]?.connection != connection {
                    state.byConnection[connection, default: []].append(id)
                }
                var made = UploadWindow(held: record.offset, size: record.size, maxSize: record.maxSize, window: 0)
                made.grant(uploadGrant(on: connection, state))
                window = UInt64(made.window)
                upload = made
            } else if record.direction == .download {
                let offset = Int64(frame.offset ?? 0)
                let granted = Int64(min(frame.window ?? UInt64(limits.windowBytes), UInt64(Int64.max)))
                download = DownloadWindow(
                    size: record.size, offset: offset, window: granted, maxWindow: limits.windowBytes)
                window = UInt64(download?.window ?? 0)
                outcome.sends = true
            }
            if state.attached[id]?.connection != connection, !(state.byConnection[connection] ?? []).contains(id) {
                state.byConnection[connection, default: []].append(id)
            }
            state.lastGeneration += 1
            state.attached[id] = Attached(
                connection: connection, link: link, download: download, upload: upload,
                generation: state.lastGeneration)
            outcome.answer = AttachedFrame(
                id: frame.id, transfer: frame.transfer, status: .success, direction: record.direction.rawValue,
                size: record.size,
                offset: record.direction == .download ? frame.offset ?? 0 : UInt64(record.offset),
                chunkBytes: UInt64(limits.chunkBytes), window: window, expires: expires(record),
                name: record.name, digest: record.digest)
            return outcome
        }
    }

    /// When `record` expires if nothing moves.
    func expires(_ record: TransferRecord) -> Timestamp {
        Timestamp(record.lastProgress.addingTimeInterval(limits.expiry.seconds))
    }

    // MARK: - Moving a download's bytes

    /// The next chunk a connection sends: which transfer, its file, and the bytes to read;
    /// nil while every window of the connection is full (or it has nothing to send). The
    /// connection's transfers take turns. What it returns counts as sent.
    func nextChunk(for connection: UInt64)
        -> (id: TransferID, file: DownloadFile, range: Range<Int64>, generation: UInt64)?
    {
        state.withLock { state in
            guard var ids = state.byConnection[connection], !ids.isEmpty else { return nil }
            let inFlight = ids.reduce(Int64(0)) { $0 + (state.attached[$1]?.download?.inFlight ?? 0) }
            let room = limits.connectionWindowBytes - inFlight
            guard room > 0 else { return nil }
            for turn in ids.indices {
                let id = ids[turn]
                guard var attached = state.attached[id], var window = attached.download,
                    let file = state.files[id],
                    let range = window.nextChunk(maxBytes: Int(min(Int64(limits.chunkBytes), room)))
                else { continue }
                attached.download = window
                state.attached[id] = attached
                // The next turn begins after this one.
                ids.append(ids.remove(at: turn))
                state.byConnection[connection] = ids
                state.movedSinceLook = true
                return (id, file, range, attached.generation)
            }
            return nil
        }
    }

    /// Whether transfers' bytes (over frames or HTTPS) moved until the last look and not since:
    /// the chunks' memory is free, for the host to give back. Called every few seconds.
    func wentQuietAfterMoving() -> Bool {
        state.withLock { state in
            if state.movedSinceLook {
                state.movedSinceLook = false
                state.wasMoving = true
                return false
            }
            defer { state.wasMoving = false }
            return state.wasMoving
        }
    }

    /// Whether attachment `generation` of transfer `id` is still the one on `connection`: a chunk
    /// read for an earlier one (detached, taken elsewhere, ended, attached again at another
    /// offset) is dropped, never sent.
    func isCurrent(_ id: TransferID, on connection: UInt64, generation: UInt64) -> Bool {
        state.withLock { state in
            guard let attached = state.attached[id] else { return false }
            return attached.connection == connection && attached.generation == generation
        }
    }

    /// A download's file could not be read, or changed: the transfer fails.
    func readFailed(_ id: TransferID, changed: Bool) -> (link: TransferPeer, state: TransferStateFrame)? {
        logger.notice("transfer \(id) fails: \(changed ? "its file changed" : "its file cannot be read")")
        return end(id, phase: .failed, error: changed ? .changed : .serviceFailed)
    }

    /// What a client's `ack` of a download leads to.
    enum AckOutcome {
        /// Nothing to do (not this connection's, not a download, or ignored).
        case none
        /// The window moved: send more.
        case moved
        /// The transfer's state to tell the client (completed, or waiting after a refusal).
        case state(TransferStateFrame)
    }

    func ack(_ frame: AckFrame, owner: TransferOwner, connection: UInt64) -> AckOutcome {
        let id = TransferID(frame.transfer)
        let now = Date()
        return state.withLock { state in
            guard let record = state.table.find(id, owner: owner), var attached = state.attached[id],
                attached.connection == connection, var window = attached.download
            else { return .none }
            let offset = Int64(min(frame.offset, UInt64(Int64.max)))
            let granted = Int64(min(frame.window, UInt64(Int64.max)))
            switch window.ack(offset: offset, window: granted) {
            case .ignore:
                return .none
            case .refuse(let code):
                let waiting = detachLocked(id, from: connection, error: code, &state) ?? record
                return .state(stateFrame(of: waiting))
            case .moved:
                attached.download = window
                state.attached[id] = attached
                // A download's offset is the client's to say again when it resumes: it is not
                // journaled for each ack.
                if offset > record.offset { _ = state.table.progressed(id, offset: offset, now: now) }
                return .moved
            case .complete:
                _ = state.table.progressed(id, offset: offset, now: now)
                guard let done = endLocked(id, phase: .completed, error: nil, now: now, &state) else { return .none }
                logger.debug("transfer \(id) completed: \(record.size) bytes sent")
                return .state(done.state)
            }
        }
    }

    /// Where a transfer attached to `connection` stands now, for the state sent each second
    /// while bytes move; nil when it is no longer attached there.
    func runningState(of id: TransferID, on connection: UInt64) -> TransferStateFrame? {
        state.withLock { state in
            guard let attached = state.attached[id], attached.connection == connection,
                let record = state.table.record(id),
                // Told by its own change, once journaled (``tell(_:to:paced:)``).
                !record.phase.isEnded, record.phase != .delivering
            else { return nil }
            return stateFrame(of: record, offset: attached.download?.acknowledged)
        }
    }

    /// The transfers attached to `connection`.
    func attached(on connection: UInt64) -> [TransferID] {
        state.withLock { $0.byConnection[connection] ?? [] }
    }

    // MARK: - Detaching, cancelling, asking

    /// The client detaches its transfer: it waits, resumable.
    func detach(_ transfer: UUID, owner: TransferOwner, connection: UInt64) {
        let id = TransferID(transfer)
        state.withLock { state in
            guard state.table.find(id, owner: owner) != nil, state.attached[id]?.connection == connection else {
                return
            }
            _ = detachLocked(id, from: connection, error: nil, &state)
        }
    }

    /// Detaches transfer `id` from `connection`: it waits, resumable, and its file is closed
    /// (opened again by the next attach).
    func detachLocked(_ id: TransferID, from connection: UInt64, error: TransferErrorCode?, _ state: inout State)
        -> TransferRecord?
    {
        removeFromConnection(id, connection, &state)
        releaseFiles(of: id, &state)
        guard let waiting = state.table.detach(id, from: connection, error: error) else { return nil }
        unwrittenChange(waiting, in: &state)
        return waiting
    }

    /// Closes what an unattached transfer does not need open: a download's file (when it can be
    /// opened again by its name), an upload's spool file (unless it is being checked).
    func releaseFiles(of id: TransferID, _ state: inout State) {
        if let file = state.files[id], file.source.path != nil { state.files[id] = nil }
        if let spool = state.spools[id], spool.isOpen, !state.finishing.contains(id) {
            spool.isOpen = false
            spool.queue.async {
                spool.file?.close()
                spool.file = nil
            }
        }
    }

    /// The client cancels its transfer: its state after (a foreign or unknown one is
    /// `notFound`), and the connection that had it attached, if another, to be told.
    func cancel(_ transfer: UUID, owner: TransferOwner, connection: UInt64)
        -> (answer: TransferStateFrame, other: TransferPeer?)
    {
        let id = TransferID(transfer)
        return state.withLock { state in
            guard let record = state.table.find(id, owner: owner) else {
                return (
                    TransferStateFrame(
                        transfer: transfer, state: TransferPhase.failed.rawValue, offset: 0, size: -1,
                        error: TransferErrorCode.notFound.rawValue), nil
                )
            }
            // An upload whose bytes are all in is the service's now: it is not taken back.
            guard !record.phase.isEnded, record.phase != .verifying, record.phase != .delivering else {
                return (stateFrame(of: record), nil)
            }
            let other = state.attached[id].flatMap { $0.connection == connection ? nil : $0.link }
            let ended = endLocked(id, phase: .canceled, error: nil, now: Date(), &state)
            logger.debug("transfer \(id) canceled by its caller")
            return (ended?.state ?? stateFrame(of: record), other)
        }
    }

    /// The most entries of one `transfers` answer, and the most bytes of results in it: a
    /// caller with more changes asks again from the cursor.
    static let maxListed = 256
    static let maxListedResultBytes = 1 << 20

    /// A caller's `transfers`: it forgets what it names, then hears what changed since its cursor.
    func list(_ query: TransfersQueryFrame, owner: TransferOwner) -> TransfersFrame {
        state.withLock { state in
            let forgotten = state.table.forget(query.forget.map(TransferID.init), owner: owner)
            for record in forgotten { removedLocked(record, &state) }
            let changes = state.table.changes(of: owner, since: query.since, limit: Self.maxListed)
            var frames: [TransferStateFrame] = []
            var resultBytes = 0
            var cursor = query.since ?? 0
            for record in changes.records {
                let bytes = record.result?.count ?? 0
                if !frames.isEmpty, resultBytes + bytes > Self.maxListedResultBytes { break }
                resultBytes += bytes
                frames.append(stateFrame(of: record))
                cursor = record.sequence
            }
            if frames.count == changes.records.count { cursor = changes.cursor }
            return TransfersFrame(id: query.id, transfers: frames, cursor: cursor)
        }
    }

    /// A connection closed: its transfers wait, resumable.
    func connectionClosed(_ connection: UInt64) {
        state.withLock { state in
            guard let ids = state.byConnection.removeValue(forKey: connection) else { return }
            for id in ids { _ = detachLocked(id, from: connection, error: nil, &state) }
        }
    }

    // MARK: - Removal: revocation, the sweep

    /// Removes every transfer of `owner` (its device unpaired, its token revoked): the
    /// connections that had one attached, to be told it is gone.
    func removeAll(of owner: TransferOwner) -> [(link: TransferPeer, state: TransferStateFrame)] {
        state.withLock { state in
            let removed = state.table.removeAll(of: owner)
            if !removed.isEmpty { logger.info("transfers: \(removed.count) of \(owner) removed (access revoked)") }
            return removed.compactMap { removedForGood($0, &state) }
        }
    }

    /// Removes every transfer `shouldGo` names (its caller may no longer open its service): the
    /// connections that had one attached, to be told it is gone.
    func remove(where shouldGo: (TransferRecord) -> Bool) -> [(link: TransferPeer, state: TransferStateFrame)] {
        state.withLock { state in
            let removed = state.table.all.filter(shouldGo).compactMap { state.table.remove($0.id) }
            if !removed.isEmpty {
                logger.info("transfers: \(removed.count) removed: their callers may no longer open their services")
            }
            return removed.compactMap { removedForGood($0, &state) }
        }
    }

    /// A transfer the table no longer has: its files and journal entry go, and the connection
    /// that had it attached is to be told it no longer exists (`notFound`).
    private func removedForGood(_ record: TransferRecord, _ state: inout State)
        -> (link: TransferPeer, state: TransferStateFrame)?
    {
        let link = state.attached[record.id]?.link
        removedLocked(record, &state)
        return link.map {
            (
                $0,
                TransferStateFrame(
                    transfer: record.id.uuid, state: TransferPhase.failed.rawValue, offset: 0, size: -1,
                    error: TransferErrorCode.notFound.rawValue)
            )
        }
    }

    /// Removes the transfers of every managed token not among `names` (revoked).
    func removeTokens(notIn names: Set<String>) -> [(link: TransferPeer, state: TransferStateFrame)] {
        let revoked = state.withLock { state in
            state.table.owners.filter {
                guard case .token(let name) = $0 else { return false }
                return !name.hasPrefix("file:") && !names.contains(name)
            }
        }
        return revoked.flatMap { removeAll(of: $0) }
    }

    /// Expires what made no progress for the expiry, and removes outcomes past the retention.
    func sweep(now: Date = Date()) -> [(link: TransferPeer, state: TransferStateFrame)] {
        state.withLock { state in
            let sweep = state.table.sweep(now: now)
            var told: [(TransferPeer, TransferStateFrame)] = []
            for record in sweep.expired {
                if let attached = state.attached[record.id] { told.append((attached.link, stateFrame(of: record))) }
                removeFromConnection(record.id, state.attached[record.id]?.connection, &state)
                state.files[record.id] = nil
                discardSpool(of: record, &state)
                notifyEnded(record, "expired")
                unwrittenChange(record, in: &state)
            }
            for record in sweep.removed { removedLocked(record, &state) }
            for record in state.table.takeRemoved() { removedLocked(record, &state) }
            if !sweep.expired.isEmpty || !sweep.removed.isEmpty {
                logger.info(
                    "transfers' sweep: \(sweep.expired.count) expired, \(sweep.removed.count) outcomes past their retention removed"
                )
            }
            return told
        }
    }

    // MARK: - Inside

    /// Ends transfer `id` as `phase`: its state, and the connection that had it attached.
    func end(_ id: TransferID, phase: TransferPhase, error: TransferErrorCode?)
        -> (link: TransferPeer, state: TransferStateFrame)?
    {
        state.withLock { state in
            let link = state.attached[id]?.link
            guard let ended = endLocked(id, phase: phase, error: error, now: Date(), &state), let link else {
                return nil
            }
            return (link, ended.state)
        }
    }

    func endLocked(
        _ id: TransferID, phase: TransferPhase, error: TransferErrorCode?, result: [UInt8]? = nil, now: Date,
        _ state: inout State
    ) -> (record: TransferRecord, state: TransferStateFrame)? {
        let connection = state.attached[id]?.connection
        guard let record = state.table.moved(id, to: phase, error: error, result: result, now: now) else {
            return nil
        }
        removeFromConnection(id, connection, &state)
        state.files[id] = nil
        discardSpool(of: record, &state)
        if phase == .canceled || phase == .expired {
            notifyEnded(record, phase == .canceled ? "canceled by its client" : "expired")
        }
        unwrittenChange(record, in: &state)
        for gone in state.table.takeRemoved() { removedLocked(gone, &state) }
        return (record, stateFrame(of: record))
    }

    func removeFromConnection(_ id: TransferID, _ connection: UInt64?, _ state: inout State) {
        state.attached[id] = nil
        guard let connection else { return }
        state.byConnection[connection]?.removeAll { $0 == id }
        if state.byConnection[connection]?.isEmpty == true { state.byConnection[connection] = nil }
    }

    /// A record the table let go of: its file closed, its journal entry removed.
    func removedLocked(_ record: TransferRecord, _ state: inout State) {
        removeFromConnection(record.id, state.attached[record.id]?.connection, &state)
        state.files[record.id] = nil
        discardSpool(of: record, &state)
        if !record.phase.isEnded { notifyEnded(record, "removed with its caller's access") }
        state.unwritten[record.id] = .some(nil)
        scheduleJournal(&state)
    }

    func unwrittenChange(_ record: TransferRecord, in state: inout State) {
        state.unwritten[record.id] = .some(record)
        scheduleJournal(&state)
        keepFloor(&state)
    }

    /// How far the floor on disk stays ahead of the change numbers given out.
    static let floorStep: UInt64 = 4096

    /// Moves the journal's floor of change numbers ahead before they reach it (a small write
    /// every ``floorStep`` changes).
    private func keepFloor(_ state: inout State) {
        guard let journal, state.table.highWater >= state.sequenceFloor else { return }
        let floor = state.table.highWater + Self.floorStep
        do {
            try journal.writeFloor(floor)
            state.sequenceFloor = floor
        } catch {
            logger.error("transfers' journal: \(error)")
        }
    }

    /// How long a change waits for others to share its write. A burst of changes (a thousand
    /// small downloads) takes one write and one sync per interval rather than one per change;
    /// what an acknowledgement waits for is written at once (``afterJournal(_:)``).
    static let journalGroupDelay = DispatchTimeInterval.milliseconds(10)

    /// Writes the changed records on the journal's queue, each at its latest version, within
    /// ``journalGroupDelay``: the last write of a record is always its latest state.
    private func scheduleJournal(_ state: inout State) {
        guard !state.writing, journal != nil else { return }
        state.writing = true
        journalQueue.asyncAfter(deadline: .now() + Self.journalGroupDelay) { [self] in drainJournal() }
    }

    /// How long the journal waits before it tries again to write changes a failed write left
    /// unwritten (a full disk, say).
    static let journalRetryDelay = DispatchTimeInterval.seconds(1)

    /// Writes the changes waiting now, in one batch of one write and one sync (on the journal's
    /// queue), then comes back ``journalGroupDelay`` later for what came meanwhile: changes that
    /// keep coming (a thousand small downloads) share a write an interval, instead of following
    /// one another's syncs one or two at a time. An `afterJournal` writes at once what waits. After
    /// a failed write, the changes wait for another try.
    private func drainJournal() {
        if writeJournalBatch() {
            journalQueue.asyncAfter(deadline: .now() + Self.journalGroupDelay) { [self] in drainJournal() }
        }
    }

    /// Writes the changes waiting now (on the journal's queue), then runs what waited for them
    /// (``afterJournal(of:paced:_:)``): false when there were none, or the write failed (then
    /// they wait again, unless a later version replaced them, and are tried again after
    /// ``journalRetryDelay``, and what waited for them waits for that try; until one is written,
    /// what it promises is not told).
    @discardableResult
    private func writeJournalBatch() -> Bool {
        guard let journal else { return false }
        let (batch, waiting) = state.withLock { state in
            let taken = (state.unwritten, state.waitingForBatch)
            state.unwritten = [:]
            state.waitingForBatch = []
            state.committing = Set(taken.0.keys)
            if taken.0.isEmpty { state.writing = false }
            return taken
        }
        defer { state.withLock { $0.committing = [] } }
        if batch.isEmpty {
            // Their changes went in an earlier batch (the queue is serial: it is on disk).
            runWaiting(waiting)
            return false
        }
        do {
            let refused = try journal.commit(batch.map { ($0.key, $0.value) })
            for (_, problem) in refused { logger.error("transfers' journal: \(problem)") }
            state.withLock { state in
                for id in batch.keys { state.journalFailed.remove(id) }
                for (id, _) in refused { state.journalFailed.insert(id) }
            }
            runWaiting(waiting)
            return true
        } catch {
            logger.error("transfers' journal: \(error); the changes are tried again")
            let retry = state.withLock { state in
                for (id, record) in batch {
                    state.journalFailed.insert(id)
                    if state.unwritten[id] == nil { state.unwritten[id] = .some(record) }
                }
                state.waitingForBatch.insert(contentsOf: waiting, at: 0)
                state.writing = true
                // One retry waits at a time, however many writes failed meanwhile.
                defer { state.retrying = true }
                return !state.retrying
            }
            if retry {
                journalQueue.asyncAfter(deadline: .now() + Self.journalRetryDelay) { [self] in
                    state.withLock { $0.retrying = false }
                    drainJournal()
                }
            }
            return false
        }
    }

    private func runWaiting(_ waiting: [(id: TransferID, body: @Sendable (_ written: Bool) -> Void)]) {
        guard !waiting.isEmpty else { return }
        let failed = state.withLock { $0.journalFailed }
        for (id, body) in waiting { body(!failed.contains(id)) }
    }

    /// Runs `body` once every change made so far is in the journal, on stable storage, telling
    /// it whether transfer `id`'s last change was written (false: the journal would not take
    /// it, and what it would promise must not be told).
    ///
    /// At once, by a write of its own, unless `paced`: then `body` waits for the journal's next
    /// write (at most ``journalGroupDelay`` after the last), and for the one after a failed write.
    func afterJournal(of id: TransferID, paced: Bool = false, _ body: @escaping @Sendable (_ written: Bool) -> Void) {
        if paced {
            state.withLock { afterJournalLocked(of: id, &$0, body) }
            return
        }
        let written: @Sendable () -> Bool = { [self] in !state.withLock { $0.journalFailed.contains(id) } }
        guard journal != nil else { return body(written()) }
        // The journal's queue is serial: this block writes what is waiting now (one batch, not
        // what keeps coming after it), then runs `body`.
        journalQueue.async { [self] in
            writeJournalBatch()
            body(written())
        }
    }

    /// ``afterJournal(of:paced:_:)``, paced, with the state held.
    func afterJournalLocked(
        of id: TransferID, _ state: inout State, _ body: @escaping @Sendable (_ written: Bool) -> Void
    ) {
        guard journal != nil else {
            journalQueue.async { body(true) }
            return
        }
        state.waitingForBatch.append((id, body))
        scheduleJournal(&state)
    }

    /// Tells `peer` the state `frame` of transfer `frame.transfer`: an outcome, or an upload
    /// handed to its service, once the journal holds it (a restart must not take back what the
    /// client was told); other states at once. `paced`: the outcome waits for the journal's next
    /// write, not one of its own (a download's completion, which no client waits for). When the
    /// journal cannot write it (a full disk), it is told all the same, as the host has it: an
    /// answer the client waits for never goes missing (a `cancelTransfer`'s, a PATCH's).
    func tell(_ frame: TransferStateFrame, to peer: TransferPeer, paced: Bool = false) {
        guard waitsForJournal(frame) else { return peer.tell(.state(frame)) }
        afterJournal(of: TransferID(frame.transfer), paced: paced) { [logger] written in
            if !written {
                logger.warning(
                    "transfer \(TransferID(frame.transfer)) \(frame.state) is told before the journal holds it (its write failed)"
                )
            }
            peer.tell(.state(frame))
        }
    }

    /// Whether telling `frame` waits for the journal: it says the transfer ended, or is being
    /// handed to its service, and the journal does not hold its transfer's last change yet (an
    /// outcome told again, to a `cancelTransfer` of a transfer long ended, say, goes at once).
    func waitsForJournal(_ frame: TransferStateFrame) -> Bool {
        guard let phase = TransferPhase(rawValue: frame.state), phase.isEnded || phase == .delivering else {
            return false
        }
        let id = TransferID(frame.transfer)
        return state.withLock {
            $0.unwritten[id] != nil || $0.committing.contains(id) || $0.journalFailed.contains(id)
        }
    }

    /// Writes `record` now, on the journal's queue, unless the table let go of it meanwhile.
    func writeNow(_ record: TransferRecord) throws(TransferStorageError) {
        guard let journal else { throw TransferStorageError(unavailable ?? "the host cannot keep transfers") }
        let outcome: Result<Void, TransferStorageError> = journalQueue.sync {
            guard state.withLock({ $0.table.find(record.id, owner: record.owner) != nil }) else {
                return .failure(TransferStorageError("transfer \(record.id) was removed before it was recorded"))
            }
            do throws(TransferStorageError) { try journal.write(record) } catch { return .failure(error) }
            return .success(())
        }
        try outcome.get()
    }

    func stateFrame(
        of record: TransferRecord, phase: TransferPhase? = nil, error: TransferErrorCode? = nil,
        offset: Int64? = nil
    ) -> TransferStateFrame {
        TransferStateFrame(
            transfer: record.id.uuid, state: (phase ?? record.phase).rawValue,
            offset: UInt64(max(offset ?? record.offset, 0)), size: record.size,
            error: (error ?? record.error)?.rawValue,
            result: record.result.map { EncodedValueSet(uncheckedBytes: ByteBuffer(bytes: $0)) })
    }
}
