import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The host runs what manifests name and loads the libraries they point to, so a manifest or
/// library that another user could have written is another user's code running as the host.
/// As sshd's StrictModes does, the host uses a manifest, a plugin library, and the folders
/// they are in, only when each belongs to root or to the host's own user and is not writable
/// by group or others (`--no-strict-modes` turns this off).
enum FileTrust {
    /// Why `path` (a file or a folder, followed through links) is not safe to trust, or nil.
    static func problem(_ path: String, what: String) -> String? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            return "cannot inspect the \(what) \(path): \(String(cString: strerror(errno)))"
        }
        let owner = geteuid()
        guard info.st_uid == owner || info.st_uid == 0 else {
            return
                "the \(what) \(path) belongs to uid \(info.st_uid), neither root nor this user (uid \(owner)); chown it, or run with --no-strict-modes"
        }
        guard info.st_mode & (S_IWGRP | S_IWOTH) == 0 else {
            return
                "the \(what) \(path) is writable by other users (mode \(String(info.st_mode & 0o7777, radix: 8))); chmod go-w it, or run with --no-strict-modes"
        }
        return nil
    }

    /// The problem with a file or with a folder on its way, whichever comes first: every
    /// folder from `/` down, as the path names them and as its links lead (the path resolved),
    /// as sshd's StrictModes checks them. Someone who may rename an entry of any folder on the
    /// way can put a file of theirs in place of the one checked, before it is read or loaded
    /// (or when a worker is restarted). A folder others may write to is accepted only with its
    /// sticky bit set (`/tmp`), where others cannot rename or remove entries that are not
    /// theirs, and then only when the entry on the way belongs to root or this user.
    static func problem(file path: String, what: String) -> String? {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        var paths = [absolute]
        if let resolved = realpath(path, nil) {
            let target = String(cString: resolved)
            free(resolved)
            if target != absolute { paths.append(target) }
        }
        for candidate in paths {
            if let problem = problemOnTheWay(to: candidate, what: what) { return problem }
        }
        return problem(path, what: what)
    }

    /// The problem with a folder on the way to `path` (absolute), or nil.
    private static func problemOnTheWay(to path: String, what: String) -> String? {
        let owner = geteuid()
        let names = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        var folder = "/"
        for name in names.dropLast() where name != "." {
            let next = folder == "/" ? "/" + name : folder + "/" + name
            var info = stat()
            guard stat(folder, &info) == 0 else {
                return
                    "cannot inspect the folder \(folder) on the way to the \(what) \(path): \(String(cString: strerror(errno)))"
            }
            guard info.st_uid == owner || info.st_uid == 0 else {
                return
                    "the folder \(folder) on the way to the \(what) \(path) belongs to uid \(info.st_uid), neither root nor this user (uid \(owner)), who could put another file in its place; chown it, or run with --no-strict-modes"
            }
            if info.st_mode & (S_IWGRP | S_IWOTH) != 0 {
                var entry = stat()
                let sticky = info.st_mode & S_ISVTX != 0
                guard sticky, lstat(next, &entry) == 0, entry.st_uid == owner || entry.st_uid == 0 else {
                    return
                        "the folder \(folder) on the way to the \(what) \(path) is writable by other users (mode \(String(info.st_mode & 0o7777, radix: 8))), who could put another file in its place; chmod go-w it, or run with --no-strict-modes"
                }
            }
            folder = next
        }
        // The file's own folder.
        var info = stat()
        guard stat(folder, &info) == 0 else {
            return "cannot inspect the folder \(folder) of the \(what) \(path): \(String(cString: strerror(errno)))"
        }
        return problem(folder, what: "folder of the \(what)")
    }

    private static func folder(of path: String) -> String {
        let folder = (path as NSString).deletingLastPathComponent
        return folder.isEmpty ? "." : folder
    }
}
