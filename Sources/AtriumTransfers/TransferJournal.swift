public import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The transfers' records on disk, one file per transfer (`ID.json` in the journal folder),
/// each replaced whole by a rename, never rewritten in place: after a crash or a power cut a
/// record is its old version or its new one, never a mix. Each write is synced (the file, then
/// the folder) before it returns, so a record the host acted on survives the machine going down.
/// Thread-safe as the file system is: the host writes one transfer's record from one place at a
/// time.
public struct TransferJournal: Sendable {
    public let folder: URL

    /// The journal in `folder`, made if it is not there, and private to the host's user (0700).
    public init(folder: URL) throws(TransferStorageError) {
        self.folder = folder
        do {
            try FileManager.default.createDirectory(
                at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw TransferStorageError(
                "cannot make the transfers' folder \(folder.path): \(error.localizedDescription)")
        }
        // The callers' files and outcomes are theirs: nobody else on the machine reads them.
        guard chmod(folder.path, 0o700) == 0 else { throw .system("cannot make private", folder) }
    }

    func file(of id: TransferID) -> URL { folder.appendingPathComponent("\(id).json", isDirectory: false) }

    /// The most bytes a record may have (its `result` is at most a message): a larger file is
    /// not one the host wrote.
    public static let maxRecordBytes = 4 << 20

    /// Writes `record`, replacing its earlier version, and syncs it.
    public func write(_ record: TransferRecord) throws(TransferStorageError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .millisecondsSince1970
        let data: Data
        do { data = try encoder.encode(record) } catch {
            throw TransferStorageError("cannot encode transfer \(record.id): \(error)")
        }
        let target = file(of: record.id)
        let temporary = folder.appendingPathComponent(".\(record.id).json.new", isDirectory: false)
        try Durable.write(data, to: temporary)
        guard rename(temporary.path, target.path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary.path)
            throw TransferStorageError("cannot replace \(target.path): \(reason)")
        }
        try Durable.syncFolder(folder)
    }

    /// Removes transfer `id`'s record.
    public func remove(_ id: TransferID) throws(TransferStorageError) {
        guard unlink(file(of: id).path) == 0 || errno == ENOENT else {
            throw .system("cannot remove", file(of: id))
        }
        try Durable.syncFolder(folder)
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

    /// Every record in the journal, and what could not be read (a file that is not a record is
    /// left where it is, and named). A write that a crash cut short left only its temporary
    /// file, which is removed.
    public func readAll() -> (records: [TransferRecord], problems: [String]) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        var records: [TransferRecord] = []
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
                records.append(record)
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
        let written = data.withUnsafeBytes { raw -> Bool in
            var offset = 0
            while offset < raw.count {
                let count = Glibc.write(descriptor, raw.baseAddress! + offset, raw.count - offset)
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { return false }
                offset += count
            }
            return true
        }
        guard written, fsync(descriptor) == 0 else { throw .system("cannot write", url) }
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
