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

    /// The problem with a file or with the folder it is in (as named, and, when the name is a
    /// link, the folder the link leads to), whichever comes first.
    static func problem(file path: String, what: String) -> String? {
        var folders = [folder(of: path)]
        if let resolved = realpath(path, nil) {
            let target = String(cString: resolved)
            free(resolved)
            if folder(of: target) != folders[0] { folders.append(folder(of: target)) }
        }
        for folder in folders {
            if let problem = problem(folder, what: "folder of the \(what)") { return problem }
        }
        return problem(path, what: what)
    }

    private static func folder(of path: String) -> String {
        let folder = (path as NSString).deletingLastPathComponent
        return folder.isEmpty ? "." : folder
    }
}
