public import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// An upload's bytes on the host while they arrive (`ID.part` in the spool folder): space
/// reserved when the upload's size is known (`posix_fallocate`), each chunk written at its
/// offset (`pwrite`, from the bytes as they came), and synced (`fdatasync`) before the host
/// acknowledges them. Owns its descriptor until ``close()``. One user at a time: the host
/// hands it from thread to thread (to its upload's queue), never uses it from two at once.
public final class SpoolFile: @unchecked Sendable {
    public let url: URL
    /// The open descriptor; -1 once closed.
    public private(set) var descriptor: Int32

    private init(url: URL, descriptor: Int32) {
        self.url = url
        self.descriptor = descriptor
    }

    /// The spool file of transfer `id` in `folder`: made (mode 0600) if it is not there, with
    /// `reserve` bytes of space taken at once when it is known. Refused with
    /// ``TransferErrorCode/insufficientStorage`` when the file system cannot hold them and
    /// still keep `floor` bytes free.
    public static func open(
        _ id: TransferID, in folder: URL, reserve: Int64? = nil, floor: Int64 = 0
    ) throws(SpoolError) -> SpoolFile {
        let url = file(of: id, in: folder)
        // Never through a link, and only a regular file of one name: what is written goes into
        // the spool, whatever someone left there.
        var descriptor = Glibc.open(url.path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        // A file made here and refused goes again; one that was there (a resumed upload) stays.
        let made = descriptor >= 0
        if !made, errno == EEXIST { descriptor = Glibc.open(url.path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        guard descriptor >= 0 else { throw .storage(TransferStorageError.system("cannot open", url)) }
        let (file, kind) = try owned(descriptor, url)
        func refuse(_ reason: String) -> SpoolError {
            file.close()
            if made { unlink(url.path) }
            return .insufficientStorage(reason)
        }
        if let reserve, reserve > 0 {
            // What is taken already (a resumed upload) is not taken again.
            let taken = Int64(kind.st_blocks) * 512
            if let free = Self.freeBytes(of: folder), free - max(reserve - taken, 0) < floor {
                throw refuse("the upload needs \(reserve) bytes; the host's disk has \(free) free and keeps \(floor)")
            }
            let result = posix_fallocate(descriptor, 0, off_t(reserve))
            if result == ENOSPC || result == EDQUOT || result == EFBIG {
                throw refuse("the host's disk cannot hold \(reserve) bytes")
            }
            // A file system without fallocate (EOPNOTSUPP) takes the bytes as they come.
        } else if floor > 0, let free = Self.freeBytes(of: folder), free < floor {
            throw refuse("the host's disk has \(free) bytes free, under the \(floor) it keeps")
        }
        // The new file's name on stable storage too: a resumed upload finds its file after a
        // power cut.
        if made {
            do { try Durable.syncFolder(folder) } catch {
                file.close()
                unlink(url.path)
                throw .storage(error)
            }
        }
        return file
    }

    /// The spool file of an upload the host held `held` bytes of (after a restart, or a
    /// detach): only the file that is there, never a new one, and only if it holds them all.
    public static func reopen(_ id: TransferID, in folder: URL, held: Int64) throws(SpoolError) -> SpoolFile {
        let url = file(of: id, in: folder)
        let descriptor = Glibc.open(url.path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else { throw .storage(TransferStorageError.system("cannot open", url)) }
        let (file, kind) = try owned(descriptor, url)
        guard Int64(kind.st_size) >= held else {
            file.close()
            throw .storage(
                TransferStorageError("\(url.path) holds \(kind.st_size) bytes, fewer than the \(held) acknowledged"))
        }
        return file
    }

    /// The spool file open as `descriptor`, and its status: only a regular file with no other
    /// name (nothing someone linked in from elsewhere); closed when it is not.
    private static func owned(_ descriptor: Int32, _ url: URL) throws(SpoolError) -> (SpoolFile, stat) {
        let file = SpoolFile(url: url, descriptor: descriptor)
        var kind = stat()
        guard fstat(descriptor, &kind) == 0, kind.st_mode & S_IFMT == S_IFREG, kind.st_nlink == 1 else {
            file.close()
            throw .storage(TransferStorageError("\(url.path) is not a regular file of the spool's own"))
        }
        return (file, kind)
    }

    /// The bytes free for an unprivileged user on the file system of `folder`.
    public static func freeBytes(of folder: URL) -> Int64? {
        var status = statvfs()
        guard statvfs(folder.path, &status) == 0 else { return nil }
        let (bytes, overflow) = Int64(clamping: status.f_bavail).multipliedReportingOverflow(
            by: Int64(clamping: status.f_frsize))
        return overflow ? .max : bytes
    }

    /// Writes `bytes` at `offset`.
    public func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(SpoolError) {
        guard Durable.writeAll(descriptor, bytes, at: offset) else {
            if errno == ENOSPC || errno == EDQUOT { throw .insufficientStorage("the host's disk is full") }
            throw .storage(TransferStorageError.system("cannot write", url))
        }
    }

    /// Puts what was written on stable storage.
    public func sync() throws(SpoolError) {
        guard fdatasync(descriptor) == 0 else { throw .storage(TransferStorageError.system("cannot sync", url)) }
    }

    /// Cuts the file to `length` bytes (what a finished upload of unknown size, or one whose
    /// reservation was larger, holds).
    public func truncate(to length: Int64) throws(SpoolError) {
        guard ftruncate(descriptor, off_t(length)) == 0 else {
            throw .storage(TransferStorageError.system("cannot truncate", url))
        }
    }

    /// Closes the descriptor (once).
    public func close() {
        guard descriptor >= 0 else { return }
        Glibc.close(descriptor)
        descriptor = -1
    }

    deinit { close() }

    /// Removes transfer `id`'s spool file from `folder`, if it is there.
    public static func remove(_ id: TransferID, in folder: URL) {
        unlink(file(of: id, in: folder).path)
    }

    /// Transfer `id`'s spool file in `folder`: `ID.part`.
    static func file(of id: TransferID, in folder: URL) -> URL {
        folder.appendingPathComponent("\(id).part", isDirectory: false)
    }
}

/// Why the spool refused or failed.
public enum SpoolError: Error, Sendable, CustomStringConvertible {
    /// No room: the client is told ``TransferErrorCode/insufficientStorage``.
    case insufficientStorage(String)
    /// The file system failed.
    case storage(TransferStorageError)

    public var description: String {
        switch self {
        case .insufficientStorage(let reason): reason
        case .storage(let error): error.description
        }
    }
}
