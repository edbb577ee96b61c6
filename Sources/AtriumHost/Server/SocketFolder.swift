import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why the host will not put its socket where it was asked to.
public struct SocketFolderError: Error, Sendable, CustomStringConvertible {
    public var description: String
}

/// The folder of the local socket. Whoever controls that folder can replace the socket with
/// their own and read what local clients send, so the host uses a folder only when it is safe:
/// a real directory (not a link) owned by the host's user or root, that other users cannot
/// write to, or can only as in /tmp, where the sticky bit keeps them from removing or
/// renaming the host's socket. A missing folder is made with mode 0700. An existing file at
/// the socket's path must belong to the host's user (it is replaced).
enum SocketFolder {
    static func prepare(for socketPath: String) throws(SocketFolderError) {
        let folder = (socketPath as NSString).deletingLastPathComponent
        let owner = geteuid()
        var info = stat()
        if lstat(folder, &info) != 0 {
            guard errno == ENOENT else {
                throw SocketFolderError(
                    description: "cannot inspect the socket folder \(folder): \(String(cString: strerror(errno)))")
            }
            // Only the last component is made here, with a mode nobody else can use.
            let parent = (folder as NSString).deletingLastPathComponent
            if !parent.isEmpty, parent != folder, lstat(parent, &info) != 0 {
                throw SocketFolderError(
                    description: "the socket folder's parent \(parent) does not exist; create it or choose --socket")
            }
            guard mkdir(folder, 0o700) == 0 || errno == EEXIST else {
                throw SocketFolderError(
                    description: "cannot create the socket folder \(folder): \(String(cString: strerror(errno)))")
            }
            guard lstat(folder, &info) == 0 else {
                throw SocketFolderError(description: "cannot inspect the socket folder \(folder)")
            }
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            throw SocketFolderError(
                description:
                    "the socket folder \(folder) is not a directory (a link or a file); remove it or choose --socket")
        }
        guard info.st_uid == owner || info.st_uid == 0 else {
            throw SocketFolderError(
                description:
                    "the socket folder \(folder) belongs to uid \(info.st_uid), not to this user (uid \(owner)): another user could replace the socket; remove the folder or choose --socket"
            )
        }
        let writableByOthers = info.st_mode & (S_IWGRP | S_IWOTH) != 0
        let sticky = info.st_mode & S_ISVTX != 0
        guard !writableByOthers || sticky else {
            throw SocketFolderError(
                description:
                    "the socket folder \(folder) is writable by other users (mode \(String(info.st_mode & 0o7777, radix: 8))): another user could replace the socket; chmod go-w it or choose --socket"
            )
        }
        var existing = stat()
        if lstat(socketPath, &existing) == 0 {
            guard existing.st_uid == owner else {
                throw SocketFolderError(
                    description:
                        "\(socketPath) exists and belongs to uid \(existing.st_uid); the host will not replace another user's file"
                )
            }
            guard existing.st_mode & S_IFMT == S_IFSOCK else {
                throw SocketFolderError(
                    description: "\(socketPath) exists and is not a socket; the host will not replace it")
            }
        }
    }
}
