import Foundation

/// Where atriumd puts its local socket unless told otherwise, and so where local clients look
/// for it: `$XDG_RUNTIME_DIR/atrium/atriumd.sock`, or `/tmp/atrium-<uid>/atriumd.sock`
/// without it.
public func defaultLocalSocketPath() -> String {
    if let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], !runtime.isEmpty {
        return runtime + "/atrium/atriumd.sock"
    }
    return "/tmp/atrium-\(getuid())/atriumd.sock"
}
