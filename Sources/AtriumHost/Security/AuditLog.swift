import Dispatch
public import Foundation
public import Logging
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The host's audit log (`--audit-log FILE`): one JSON object per line, for every security
/// event: pairings and their outcomes, revocations, opens (accepted or refused), launches,
/// token use, and refused local clients, each with the device's identity and address where
/// there is one. Unlike the rate-limited refusals of the log, every event is written.
///
/// Lines are written in order on a queue of the log's own, so no network thread waits for
/// the disk; if the disk falls behind by more than `maxQueued` lines, further lines are
/// dropped, counted, and the count is written as an event of its own once it catches up.
public final class AuditLog: Sendable {
    let path: String
    private let descriptor: Int32
    private let queue = DispatchQueue(label: "atrium.audit")
    private let logger: Logger
    private struct Backlog {
        var queued = 0
        var dropped = 0
    }
    private let backlog = Mutex(Backlog())
    static let maxQueued = 10_000

    /// Opens `file` for appending (made mode 0600 if missing; a link is not followed).
    public init(file: URL, logger: Logger) throws(HostStartError) {
        path = file.path
        self.logger = logger
        descriptor = open(file.path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            throw HostStartError("cannot open the audit log \(file.path): \(String(cString: strerror(errno)))")
        }
    }

    deinit { close(descriptor) }

    /// Writes one event: `fields` beside `time` (ISO 8601, UTC) and `event`.
    func record(_ event: String, _ fields: [String: String]) {
        var line: [String: String] = fields
        line["event"] = event
        line["time"] = Date().formatted(.iso8601)
        let object = line
        let admitted = backlog.withLock { backlog -> Int? in
            guard backlog.queued < Self.maxQueued else {
                backlog.dropped += 1
                return nil
            }
            backlog.queued += 1
            let dropped = backlog.dropped
            backlog.dropped = 0
            return dropped
        }
        guard let dropped = admitted else { return }
        queue.async { [self] in
            if dropped > 0 { append(["event": "audit.dropped", "count": "\(dropped)", "time": object["time"] ?? ""]) }
            append(object)
            backlog.withLock { $0.queued -= 1 }
        }
    }

    private func append(_ object: [String: String]) {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
        let line = Array(data) + [0x0a]
        let written = line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        if written != line.count {
            logger.error("the audit log \(path) could not be written: \(String(cString: strerror(errno)))")
        }
    }

    /// Waits until every line recorded so far is written (for shutdown and tests).
    func flush() {
        queue.sync {}
    }
}
