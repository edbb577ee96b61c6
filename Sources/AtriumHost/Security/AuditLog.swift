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
/// there is one.
///
/// Every event of an authorized party or of the operator is written. What peers that are not
/// authorized cause (refused frames, refused tokens, plain TCP where TLS is required) is
/// aggregated as the log's refusals are: the first event of each peer and kind in an interval
/// is written at once, the rest are counted, and the count is written as one line (`count`,
/// `aggregated`) once the interval has passed. So a stranger who sends refused frames as fast
/// as it can writes a few lines an interval, not one per frame.
///
/// Lines are written in order on a queue of the log's own, so no network thread waits for
/// the disk. If the disk falls behind, further lines are dropped, counted, and the count is
/// written as an event of its own once it catches up: strangers' lines have a small share of
/// the queue of their own, so that they never crowd out the events that matter.
public final class AuditLog: Sendable {
    let path: String
    private let descriptor: Int32
    private let queue = DispatchQueue(label: "atrium.audit")
    private let logger: Logger
    private let interval: Duration
    /// Lines waiting for the disk, of one share of the queue, and those dropped since the
    /// last one admitted.
    private struct Share {
        let limit: Int
        var queued = 0
        var dropped = 0

        /// Admits one more line, and returns how many were dropped before it (reset), or nil
        /// when the share is full (the line is dropped, counted).
        mutating func admit() -> Int? {
            guard queued < limit else {
                dropped += 1
                return nil
            }
            queued += 1
            defer { dropped = 0 }
            return dropped
        }
    }
    private struct Backlog {
        var trusted = Share(limit: AuditLog.maxQueued)
        var strangers = Share(limit: AuditLog.maxStrangersQueued)
        /// Strangers' events counted and not written, by peer and kind.
        var windows: [String: Window] = [:]
    }
    private struct Window {
        var opened: ContinuousClock.Instant
        var suppressed: Int
        var event: String
        var fields: [String: String]
    }
    private let backlog = Mutex(Backlog())
    /// The most lines waiting to be written: of authorized parties and the operator, and of
    /// strangers.
    static let maxQueued = 10_000
    static let maxStrangersQueued = 1_000
    /// The most peers and kinds counted apart in one interval (past it they share one count).
    static let maxWindows = 1_024

    /// Opens `file` for appending (made mode 0600 if missing; a link is not followed).
    /// Strangers' events are aggregated over `interval`.
    public init(file: URL, interval: Duration = .seconds(10), logger: Logger) throws(HostStartError) {
        path = file.path
        self.logger = logger
        self.interval = interval
        descriptor = open(file.path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            throw HostStartError("cannot open the audit log \(file.path): \(String(cString: strerror(errno)))")
        }
    }

    deinit { close(descriptor) }

    /// Writes one event: `fields` beside `time` (ISO 8601, UTC) and `event`. With `stranger`,
    /// the event is of a peer that is not authorized (its address, or "local"): aggregated
    /// with the others of that peer and kind (`event`, and `fields["frame"]`).
    func record(_ event: String, _ fields: [String: String], stranger peer: String? = nil) {
        var line: [String: String] = fields
        line["event"] = event
        line["time"] = Date().formatted(.iso8601)
        guard let peer else {
            enqueue(line, stranger: false)
            return
        }
        let now = ContinuousClock.now
        let key = "\(peer) \(event) \(fields["frame"] ?? "")"
        let due = backlog.withLock { backlog -> Int? in
            let key = backlog.windows[key] != nil || backlog.windows.count < Self.maxWindows ? key : "(other peers)"
            if let window = backlog.windows[key], now - window.opened < interval {
                backlog.windows[key]!.suppressed += 1
                return nil
            }
            let before = backlog.windows[key]?.suppressed ?? 0
            backlog.windows[key] = Window(opened: now, suppressed: 0, event: event, fields: fields)
            return before
        }
        guard let due else { return }
        if due > 0 { line["more since last written"] = "\(due)" }
        enqueue(line, stranger: true)
    }

    /// Writes, for each peer and kind whose interval has passed with events left unwritten,
    /// how many there were (the server calls it once per interval, and at shutdown with
    /// `all`): so that the end of a flood is counted too.
    func writeCounts(all: Bool = false) {
        let now = ContinuousClock.now
        let due = backlog.withLock { backlog -> [Window] in
            var due: [Window] = []
            for (key, window) in backlog.windows where all || now - window.opened >= interval {
                if window.suppressed > 0 { due.append(window) }
                backlog.windows[key] = nil
            }
            return due
        }
        let time = Date().formatted(.iso8601)
        for window in due {
            var line = window.fields
            line["event"] = window.event
            line["time"] = time
            line["count"] = "\(window.suppressed)"
            line["aggregated"] = "true"
            enqueue(line, stranger: true)
        }
    }

    private func enqueue(_ line: [String: String], stranger: Bool) {
        let admitted = backlog.withLock { backlog in
            stranger ? backlog.strangers.admit() : backlog.trusted.admit()
        }
        guard let dropped = admitted else { return }
        queue.async { [self] in
            if dropped > 0 {
                var note = ["event": "audit.dropped", "count": "\(dropped)", "time": line["time"] ?? ""]
                if stranger { note["of"] = "peers that are not authorized" }
                append(note)
            }
            append(line)
            backlog.withLock {
                if stranger { $0.strangers.queued -= 1 } else { $0.trusted.queued -= 1 }
            }
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

    /// Writes what is counted and waits until every line recorded so far is written (for
    /// shutdown and tests).
    func flush() {
        writeCounts(all: true)
        queue.sync {}
    }
}
