public import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The transfers' records on disk: an append-only log (`transfers.log` in the journal folder) of
/// JSON lines, each a transfer's new record or its removal; a transfer's latest line is its
/// record. A batch of changes is one write and one `fdatasync`, however many transfers it
/// holds, so a burst of small transfers costs a sync, not a file each. No line is rewritten:
/// a crash can leave only the last batch cut short, never acknowledged, and what it left is
/// cut off when the journal is next opened (as it is after a write that failed). When most of
/// the log is versions later lines replaced, it is compacted: the latest lines are copied to a
/// new file, synced, and renamed over the log.
///
/// Records of the older layout, a file per transfer (`ID.json`), are read, moved into the log,
/// and their files removed, by ``readAll()``.
///
/// Thread-safe: changes from several threads are appended one batch at a time.
public final class TransferJournal: Sendable {
    public let folder: URL
    /// The log: `transfers.log` in the folder.
    public let logFile: URL
    private let log: Mutex<Log>
    /// For tests: the next this many batches fail halfway through their write, as on a disk
    /// that fills; the next this many attempts to cut off what a failed write left fail.
    let injectedFailures = Atomic<Int>(0)
    let injectedCutFailures = Atomic<Int>(0)

    /// The open log, where its whole lines end, and where each transfer's latest line is.
    struct Log {
        var descriptor: Int32
        var size: Int64
        var latest: [TransferID: Range<Int64>]
        var liveBytes: Int64
        /// A write failed and what it left past `size` may not have been cut off yet.
        var dirty = false
        /// A compaction's rename may not be on stable storage yet (its folder's sync failed).
        var folderUnsynced = false
        /// The size past which the log is compacted (moved on after a compaction failed).
        var compactAt = TransferJournal.compactionFloor
        /// Files of the older layout may still be in the folder: a removal also removes its file.
        var olderFiles = false
        /// The transfers whose latest line in the log is their removal.
        var removed: Set<TransferID> = []
    }

    /// One line of the log: a record's new version, or a transfer's removal.
    struct Entry: Codable {
        var record: TransferRecord?
        var removed: TransferID?
    }

    /// What the index needs of a line (whose it is, and whether it removes it), read without
    /// making the record: the records are made once, of the latest lines only, by ``readAll()``.
    struct EntryKey: Decodable {
        struct Record: Decodable { var id: TransferID }
        var record: Record?
        var removed: TransferID?
    }

    /// What could not be read when the log was opened (lines that are not records).
    let openingProblems: [String]

    /// The journal in `folder`, made if it is not there, and private to the host's user (0700;
    /// the log 0600). A log that is a link, or not a regular file, is refused, never followed.
    public init(folder: URL) throws(TransferStorageError) {
        self.folder = folder
        logFile = folder.appendingPathComponent("transfers.log", isDirectory: false)
        do {
            try FileManager.default.createDirectory(
                at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw TransferStorageError(
                "cannot make the transfers' folder \(folder.path): \(error.localizedDescription)")
        }
        // The callers' files and outcomes are theirs: nobody else on the machine reads them.
        guard chmod(folder.path, 0o700) == 0 else { throw .system("cannot make private", folder) }
        let existed = access(logFile.path, F_OK) == 0
        let descriptor = open(logFile.path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .system("cannot open", logFile) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            close(descriptor)
            throw TransferStorageError("\(logFile.path) is not a regular file")
        }
        var latest: [TransferID: Range<Int64>] = [:]
        var liveBytes: Int64 = 0
        var removed: Set<TransferID> = []
        var problems: [String] = []
        let path = logFile.path
        let (end, whole) = Self.scan(descriptor, as: EntryKey.self, problem: { problems.append("\(path): \($0)") }) {
            range, entry in
            guard let entry else { return }
            if let id = entry.record?.id ?? entry.removed, let old = latest.removeValue(forKey: id) {
                liveBytes -= Int64(old.count)
            }
            if let id = entry.record?.id {
                latest[id] = range
                liveBytes += Int64(range.count)
                removed.remove(id)
            } else if let id = entry.removed {
                removed.insert(id)
            }
        }
        // A log that cannot be read to its end is not cut there: its later lines may be what a
        // client was told.
        guard whole else {
            close(descriptor)
            throw .system("cannot read", logFile)
        }
        // A last line a crash cut short: removed, so that the next line starts clean.
        if end < status.st_size, ftruncate(descriptor, off_t(end)) != 0 {
            close(descriptor)
            throw .system("cannot cut the unfinished last line of", logFile)
        }
        if !existed {
            do { try Durable.syncFolder(folder) } catch {
                close(descriptor)
                throw error
            }
        }
        openingProblems = problems
        log = Mutex(Log(descriptor: descriptor, size: end, latest: latest, liveBytes: liveBytes, removed: removed))
    }

    deinit {
        _ = log.withLock { close($0.descriptor) }
    }

    func file(of id: TransferID) -> URL { folder.appendingPathComponent("\(id).json", isDirectory: false) }

    /// The most bytes a record may have (its `result` is at most a message): a larger line, or
    /// file of the older layout, is not one the host wrote.
    public static let maxRecordBytes = 4 << 20

    /// The log is compacted when it is larger than this and than ``compactionFactor`` times its
    /// transfers' latest lines.
    static let compactionFloor: Int64 = 1 << 20
    static let compactionFactor: Int64 = 4

    /// Writes `record`, replacing its earlier version, and syncs it.
    public func write(_ record: TransferRecord) throws(TransferStorageError) {
        if let (_, problem) = try commit([(record.id, record)]).first { throw TransferStorageError(problem) }
    }

    /// Removes transfer `id`'s record.
    public func remove(_ id: TransferID) throws(TransferStorageError) {
        try commit([(id, nil)])
    }

    /// Writes a batch of changes (a record's new version, or nil: its removal) with one write
    /// and one `fdatasync`: when this returns, all of them are on stable storage but the records
    /// it returns, which no line can hold (over ``maxRecordBytes``), each with the reason; when
    /// it throws, none of them is in the log.
    @discardableResult
    public func commit(_ changes: [(id: TransferID, record: TransferRecord?)]) throws(TransferStorageError)
        -> [(id: TransferID, problem: String)]
    {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .millisecondsSince1970
        var bytes: [UInt8] = []
        var lines: [(id: TransferID, count: Int, live: Bool)] = []
        var refused: [(id: TransferID, problem: String)] = []
        for (id, record) in changes {
            let line: Data
            do { line = try encoder.encode(Entry(record: record, removed: record == nil ? id : nil)) } catch {
                refused.append((id, "cannot encode transfer \(id): \(error)"))
                continue
            }
            guard line.count < Self.maxRecordBytes else {
                refused.append(
                    (
                        id,
                        "transfer \(id)'s record is \(line.count) bytes, over the \(Self.maxRecordBytes) a record may have"
                    ))
                continue
            }
            bytes.append(contentsOf: line)
            bytes.append(0x0A)
            lines.append((id, line.count + 1, record != nil))
        }
        let removals = changes.filter { $0.record == nil }.map(\.id)
        try log.withLock { log throws(TransferStorageError) in
            try repair(&log)
            if log.olderFiles {
                // A transfer removed here must not come back from a file of the older layout
                // (one that cannot be removed is still stale: the log's removal line says so,
                // until a compaction).
                for id in removals { unlink(file(of: id).path) }
            } else if lines.allSatisfy({ !$0.live && log.latest[$0.id] == nil }) {
                // A removal of what the log does not hold needs no line.
                return
            }
            if lines.isEmpty { return }
            let start = log.size
            var written = bytes.withUnsafeBytes { bytes in
                // A disk that fills in the middle of a batch, for tests: half of it is written.
                guard injectedFailures.load(ordering: .relaxed) > 0 else {
                    return Durable.writeAll(log.descriptor, bytes, at: start)
                }
                injectedFailures.subtract(1, ordering: .relaxed)
                _ = Durable.writeAll(
                    log.descriptor, UnsafeRawBufferPointer(rebasing: bytes[..<(bytes.count / 2)]), at: start)
                errno = ENOSPC
                return false
            }
            written = written && fdatasync(log.descriptor) == 0
            guard written else {
                let failure = TransferStorageError.system("cannot write", logFile)
                // Whatever part of the batch went in is cut off before the next batch is written.
                log.dirty = true
                try? repair(&log)
                throw failure
            }
            var offset = start
            for line in lines {
                if let old = log.latest.removeValue(forKey: line.id) { log.liveBytes -= Int64(old.count) }
                if line.live {
                    log.latest[line.id] = offset..<offset + Int64(line.count)
                    log.liveBytes += Int64(line.count)
                    log.removed.remove(line.id)
                } else {
                    log.removed.insert(line.id)
                }
                offset += Int64(line.count)
            }
            log.size = offset
            if log.size > log.compactAt, log.size > Self.compactionFactor * log.liveBytes {
                // The changes are on disk already (in this file, which stays the log unless the
                // compaction's rename is): a compaction that fails leaves the log as it is, and
                // is tried again once the log has grown by another ``compactionFloor``.
                do { try Self.compact(&log, in: folder, as: logFile) } catch {
                    if !log.folderUnsynced { log.compactAt = log.size + Self.compactionFloor }
                }
            }
        }
        return refused
    }

    /// Before a batch: cuts off what a failed write left, and syncs the folder a compaction's
    /// rename is in; throws when it cannot (nothing may be written after such bytes, or into a
    /// log a power cut could take back).
    private func repair(_ log: inout Log) throws(TransferStorageError) {
        if log.dirty {
            var status = stat()
            if injectedCutFailures.load(ordering: .relaxed) > 0 {
                injectedCutFailures.subtract(1, ordering: .relaxed)
                throw TransferStorageError("cannot cut off a failed write at the end of \(logFile.path) (a test's)")
            }
            guard ftruncate(log.descriptor, off_t(log.size)) == 0, fstat(log.descriptor, &status) == 0,
                Int64(status.st_size) == log.size
            else { throw .system("cannot cut off a failed write at the end of", logFile) }
            log.dirty = false
        }
        if log.folderUnsynced {
            try Durable.syncFolder(folder)
            log.folderUnsynced = false
        }
    }

    /// Compacts the log now (it is also compacted by itself as it grows).
    public func compact() throws(TransferStorageError) {
        try log.withLock { log throws(TransferStorageError) in
            try repair(&log)
            try Self.compact(&log, in: folder, as: logFile)
        }
    }

    /// Takes an exclusive lock on the folder's `lock` file, held while the returned descriptor
    /// is open: two hosts never keep transfers in one folder (each would cut off the other's
    /// last lines, or compact the log from under it). Throws when another holds it.
    public static func lock(_ folder: URL) throws(TransferStorageError) -> Int32 {
        let file = folder.appendingPathComponent("lock", isDirectory: false)
        let descriptor = open(file.path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .system("cannot open", file) }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let reason = errno
            close(descriptor)
            if reason == EWOULDBLOCK {
                throw TransferStorageError("another process (an atriumd?) keeps its transfers in \(folder.path)")
            }
            errno = reason
            throw .system("cannot lock", file)
        }
        return descriptor
    }

    /// The log's size in bytes.
    public var size: Int64 { log.withLock { $0.size } }

    /// Copies each transfer's latest line to a new file, syncs it, and renames it over the log.
    private static func compact(_ log: inout Log, in folder: URL, as logFile: URL) throws(TransferStorageError) {
        let temporary = folder.appendingPathComponent(".transfers.log.new", isDirectory: false)
        unlink(temporary.path)
        let descriptor = open(temporary.path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .system("cannot write", temporary) }
        var latest: [TransferID: Range<Int64>] = [:]
        var size: Int64 = 0
        do throws(TransferStorageError) {
            var line = [UInt8]()
            for (id, range) in log.latest.sorted(by: { $0.value.lowerBound < $1.value.lowerBound }) {
                line = [UInt8](repeating: 0, count: range.count)
                let read = line.withUnsafeMutableBytes { Durable.readAll(log.descriptor, $0, at: range.lowerBound) }
                guard read == range.count else { throw TransferStorageError.system("cannot read", logFile) }
                guard line.withUnsafeBytes({ Durable.writeAll(descriptor, $0, at: size) }) else {
                    throw TransferStorageError.system("cannot write", temporary)
                }
                latest[id] = size..<size + Int64(range.count)
                size += Int64(range.count)
            }
            guard fsync(descriptor) == 0 else { throw TransferStorageError.system("cannot write", temporary) }
            guard rename(temporary.path, logFile.path) == 0 else {
                throw TransferStorageError.system("cannot replace", logFile)
            }
        } catch {
            close(descriptor)
            unlink(temporary.path)
            throw error
        }
        close(log.descriptor)
        log.descriptor = descriptor
        log.size = size
        log.latest = latest
        log.liveBytes = size
        log.removed = []
        log.compactAt = compactionFloor
        log.folderUnsynced = true
        try Durable.syncFolder(folder)
        log.folderUnsynced = false
    }

    /// Reads each whole line of the log at `descriptor` in order, giving its range and its entry
    /// (nil: a line that is not one, or over the limit); returns where the last whole line ends,
    /// and whether the file was read to its end (false: a read failed, and `errno` says why).
    static func scan<Line: Decodable>(
        _ descriptor: Int32, as line: Line.Type, problem: (String) -> Void,
        _ body: (Range<Int64>, Line?) -> Void
    ) -> (end: Int64, whole: Bool) {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        var pending: [UInt8] = []
        var pendingStart: Int64 = 0
        var overLimit = false
        var position: Int64 = 0
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let count = chunk.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, off_t(position)) }
            if count < 0, errno == EINTR { continue }
            if count < 0 { return (pendingStart, false) }
            if count == 0 { break }
            position += Int64(count)
            var lineStart = 0
            while let newline = chunk[lineStart..<count].firstIndex(of: 0x0A) {
                let end = position - Int64(count) + Int64(newline) + 1
                let range = pendingStart..<end
                if overLimit || range.count - 1 > maxRecordBytes {
                    problem(
                        "a line of \(range.count - 1) bytes at \(range.lowerBound), over the \(maxRecordBytes) a record may have"
                    )
                    body(range, nil)
                } else {
                    pending.append(contentsOf: chunk[lineStart..<newline])
                    do {
                        body(range, try decoder.decode(Line.self, from: Data(pending)))
                    } catch {
                        problem(
                            "the line at \(range.lowerBound) is not a transfer's record (\(error.localizedDescription))"
                        )
                        body(range, nil)
                    }
                }
                pending.removeAll(keepingCapacity: true)
                overLimit = false
                pendingStart = end
                lineStart = newline + 1
            }
            if !overLimit {
                pending.append(contentsOf: chunk[lineStart..<count])
                if pending.count > maxRecordBytes {
                    overLimit = true
                    pending.removeAll()
                }
            }
        }
        return (pendingStart, true)
    }

    /// The change number the host promises its transfers' change numbers stay above, kept in
    /// the journal's folder (`sequence-floor`), so that a caller's cursor from before a restart
    /// never hides a later change; 0 when there is none.
    public func readFloor() -> UInt64 {
        guard let data = try? Durable.read(folder.appendingPathComponent("sequence-floor"), limit: 64),
            let text = String(data: data, encoding: .utf8)
        else { return 0 }
        return UInt64(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
    }

    /// Writes the floor (replaced by a rename, synced).
    public func writeFloor(_ value: UInt64) throws(TransferStorageError) {
        let temporary = folder.appendingPathComponent(".sequence-floor.new")
        try Durable.write(Data("\(value)\n".utf8), to: temporary)
        guard rename(temporary.path, folder.appendingPathComponent("sequence-floor").path) == 0 else {
            throw .system("cannot replace", folder.appendingPathComponent("sequence-floor"))
        }
        try Durable.syncFolder(folder)
    }

    /// Every record in the journal (each transfer's latest line in the log), and what could not
    /// be read: a line that is not a record is named and skipped. Records of the older layout
    /// (`ID.json`) are taken too, and moved into the log (their files removed once it holds
    /// them); a file of that layout that is not a record is left where it is, and named; a
    /// write of it a crash cut short left only its temporary file, which is removed.
    public func readAll() throws(TransferStorageError) -> (records: [TransferRecord], problems: [String]) {
        var problems = openingProblems
        var records: [TransferID: TransferRecord] = [:]
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        // Each transfer's latest line, found by the index: the log is not read whole again.
        let seen = try log.withLock { log throws(TransferStorageError) -> Set<TransferID> in
            for (id, range) in log.latest {
                var line = [UInt8](repeating: 0, count: range.count - 1)
                let read = line.withUnsafeMutableBytes { Durable.readAll(log.descriptor, $0, at: range.lowerBound) }
                guard read == line.count else { throw .system("cannot read", logFile) }
                do {
                    if let record = try decoder.decode(Entry.self, from: Data(line)).record { records[id] = record }
                } catch {
                    problems.append(
                        "\(logFile.path): the line at \(range.lowerBound) is not a transfer's record (\(error.localizedDescription))"
                    )
                }
            }
            return Set(log.latest.keys).union(log.removed)
        }
        let older = readOlderLayout()
        problems += older.problems
        // A transfer the log knows (even as removed) is the log's: its older file is stale.
        let moving = older.records.filter { !seen.contains($0.record.id) }
        for (record, _) in moving { records[record.id] = record }
        var kept: Set<TransferID> = []
        do {
            if !moving.isEmpty {
                for (id, problem) in try commit(moving.map { ($0.record.id, $0.record) }) {
                    problems.append(
                        "a record of the older layout is not moved into the log (its file stays): \(problem)")
                    kept.insert(id)
                }
            }
            for (record, file) in older.records where !kept.contains(record.id) {
                if unlink(file.path) != 0, errno != ENOENT { kept.insert(record.id) }
            }
            if !older.records.isEmpty { try Durable.syncFolder(folder) }
        } catch {
            problems.append("records of the older layout are not moved into the log (they stay): \(error)")
            kept.formUnion(older.records.map(\.record.id))
        }
        // Removing one of those transfers removes its file too: it never comes back.
        if !kept.isEmpty { log.withLock { $0.olderFiles = true } }
        return (records.values.sorted { $0.id.description < $1.id.description }, problems)
    }

    /// The records of the older layout, a file per transfer, with their files.
    private func readOlderLayout() -> (records: [(record: TransferRecord, file: URL)], problems: [String]) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        var records: [(TransferRecord, URL)] = []
        var problems: [String] = []
        for name in names.sorted() {
            let url = folder.appendingPathComponent(name)
            if name.hasPrefix("."), name.hasSuffix(".json.new") {
                unlink(url.path)
                continue
            }
            guard name.hasSuffix(".json") else { continue }
            do {
                let data = try Durable.read(url, limit: Self.maxRecordBytes)
                let record = try decoder.decode(TransferRecord.self, from: data)
                guard "\(record.id).json" == name else {
                    problems.append("\(url.path): holds transfer \(record.id), not the one its name says")
                    continue
                }
                records.append((record, url))
            } catch let error as TransferStorageError {
                problems.append("not read: \(error)")
            } catch {
                problems.append("\(url.path): not a transfer record (\(error.localizedDescription))")
            }
        }
        return (records, problems)
    }
}

/// Why the transfers' storage failed: the path and the system's reason.
public struct TransferStorageError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }

    /// `what` failed on `url`, for the reason `errno` gives.
    static func system(_ what: String, _ url: URL) -> TransferStorageError {
        TransferStorageError("\(what) \(url.path): \(String(cString: strerror(errno)))")
    }
}

/// Writing that survives a crash: the bytes synced before the call returns.
enum Durable {
    /// Writes `data` to a new file at `url` (mode 0600) and syncs it. Whatever was at `url` is
    /// removed first, and the file is made anew, never followed through a link: a link left
    /// there cannot make the host write elsewhere.
    static func write(_ data: Data, to url: URL) throws(TransferStorageError) {
        unlink(url.path)
        let descriptor = open(url.path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .system("cannot write", url) }
        defer { close(descriptor) }
        let written = data.withUnsafeBytes { writeAll(descriptor, $0, at: 0) }
        guard written, fsync(descriptor) == 0 else { throw .system("cannot write", url) }
    }

    /// Writes all of `bytes` at `offset` of the descriptor's file (`pwrite`, again after a short
    /// write or a signal); false on an error, with `errno` set.
    static func writeAll(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) -> Bool {
        var done = 0
        while done < bytes.count {
            let count = pwrite(descriptor, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return false }
            done += count
        }
        return true
    }

    /// Fills `bytes` from `offset` of the descriptor's file (`pread`, again after a short read or
    /// a signal): how many came (fewer only at the file's end), or nil on an error.
    static func readAll(_ descriptor: Int32, _ bytes: UnsafeMutableRawBufferPointer, at offset: Int64) -> Int? {
        var done = 0
        while done < bytes.count {
            let count = pread(descriptor, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else { return nil }
            if count == 0 { break }
            done += count
        }
        return done
    }

    /// The bytes of the regular file at `url`, at most `limit` of them; a link, a FIFO, a
    /// device or a larger file is refused (without blocking on it).
    static func read(_ url: URL, limit: Int) throws(TransferStorageError) -> Data {
        let descriptor = open(url.path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else { throw .system("cannot open", url) }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            throw TransferStorageError("\(url.path) is not a regular file")
        }
        guard status.st_size <= limit else {
            throw TransferStorageError("\(url.path) is \(status.st_size) bytes, over the \(limit) a record may have")
        }
        var data = Data(count: Int(status.st_size))
        let count = data.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
        guard count == Int(status.st_size) else { throw .system("cannot read", url) }
        return data
    }

    /// Syncs `folder`, so that a rename or an unlink in it is on stable storage.
    static func syncFolder(_ folder: URL) throws(TransferStorageError) {
        let descriptor = open(folder.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .system("cannot open", folder) }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw .system("cannot sync", folder) }
    }
}
