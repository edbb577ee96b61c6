import CAtriumSystem
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Which file a download sends, as the host saw it when the service offered it: enough to open
/// it again after a restart, and to tell that it is still the same file, unchanged.
public struct DownloadSource: Sendable, Codable, Equatable {
    /// Where the file was when it was offered (from the kernel, not from the network); nil when
    /// it had no name then (deleted, or not in a file system with names): such a download cannot
    /// outlive the host's process.
    public var path: String?
    public var device: UInt64
    public var inode: UInt64
    public var size: Int64
    /// Its last modification, in nanoseconds since 1970.
    public var modified: Int64

    public init(path: String?, device: UInt64, inode: UInt64, size: Int64, modified: Int64) {
        self.path = path
        self.device = device
        self.inode = inode
        self.size = size
        self.modified = modified
    }
}

/// The open file a download reads from: the host's own duplicate of the descriptor a service
/// offered (the service keeps and closes its own). Reads at offsets (`pread`), from any thread;
/// before each read the file is checked to be as it was offered (its size and modification
/// time), so that a file that changes under a download fails it (``TransferErrorCode/changed``)
/// rather than sending a mix of two versions.
public final class DownloadFile: Sendable {
    public let source: DownloadSource
    private let descriptor: Int32

    private init(descriptor: Int32, source: DownloadSource) {
        self.descriptor = descriptor
        self.source = source
    }

    deinit { close(descriptor) }

    /// Why a file cannot be offered, or opened again.
    public enum Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        /// Not an open descriptor.
        case notOpen
        /// Not a regular file (a directory, a FIFO, a device, a socket).
        case notARegularFile
        /// Not open for reading.
        case notReadable
        /// The file is gone, or is no longer the one offered.
        case changed(String)

        public var description: String {
            switch self {
            case .notOpen: "not an open file descriptor"
            case .notARegularFile: "not a regular file"
            case .notReadable: "not open for reading"
            case .changed(let why): "the file changed: \(why)"
            }
        }
    }

    /// The host's own copy of `descriptor` (a service's, left open for the service to close).
    public static func offered(_ descriptor: Int32) throws(Refusal) -> DownloadFile {
        guard descriptor >= 0 else { throw .notOpen }
        let flags = fcntl(descriptor, F_GETFL)
        guard flags >= 0 else { throw .notOpen }
        guard flags & O_ACCMODE != O_WRONLY else { throw .notReadable }
        let copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 3)
        guard copy >= 0 else { throw .notOpen }
        var status = stat()
        guard fstat(copy, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            close(copy)
            throw .notARegularFile
        }
        return DownloadFile(
            descriptor: copy, source: Self.source(of: status, path: Self.path(of: copy)))
    }

    /// Opens `source` again (after a restart): only the same file (device and inode), unchanged
    /// (size and modification time), and never through a link.
    public static func reopen(_ source: DownloadSource) throws(Refusal) -> DownloadFile {
        guard let path = source.path else { throw .changed("it had no name the host could open again") }
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else { throw .changed("\(path): \(String(cString: strerror(errno)))") }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            close(descriptor)
            throw .changed("\(path) is not a regular file")
        }
        let now = Self.source(of: status, path: path)
        guard now == source else {
            close(descriptor)
            throw .changed("\(path) is another file now, or was modified")
        }
        return DownloadFile(descriptor: descriptor, source: now)
    }

    /// Whether the file is still as it was offered.
    public var isUnchanged: Bool {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return false }
        return Int64(status.st_size) == source.size && Self.nanoseconds(status.st_mtim) == source.modified
    }

    /// Reads `count` bytes at `offset` into `buffer` (at least `count` bytes); returns how many
    /// came (fewer only when the file shrank) or nil on an error.
    public func read(into buffer: UnsafeMutableRawBufferPointer, count: Int, at offset: Int64) -> Int? {
        precondition(count <= buffer.count)
        return Durable.readAll(descriptor, UnsafeMutableRawBufferPointer(rebasing: buffer[..<count]), at: offset)
    }

    /// Reads `count` bytes at `offset` into `buffer` only if the page cache holds them all,
    /// never waiting for the disk: true when it did (then on an event loop the read costs no
    /// thread hop), false when the bytes must be read where a wait is allowed.
    public func readCached(into buffer: UnsafeMutableRawBufferPointer, count: Int, at offset: Int64) -> Bool {
        precondition(count <= buffer.count)
        var done = 0
        while done < count {
            let got = atrium_pread_cached(
                descriptor, buffer.baseAddress! + done, UInt(count - done), offset + Int64(done))
            guard got > 0 else { return false }
            done += got
        }
        return true
    }

    private static func path(of descriptor: Int32) -> String? {
        let link = "/proc/self/fd/\(descriptor)"
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(link, &buffer, buffer.count - 1)
        guard count > 0, buffer[0] == 0x2F else { return nil }
        let path = String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        // A file deleted since it was opened has no name to open again.
        return path.hasSuffix(" (deleted)") ? nil : path
    }

    private static func source(of status: stat, path: String?) -> DownloadSource {
        DownloadSource(
            path: path, device: UInt64(status.st_dev), inode: UInt64(status.st_ino), size: Int64(status.st_size),
            modified: nanoseconds(status.st_mtim))
    }

    private static func nanoseconds(_ time: timespec) -> Int64 {
        Int64(time.tv_sec) &* 1_000_000_000 &+ Int64(time.tv_nsec)
    }
}
