import Logging
import NIOCore
import Synchronization

/// Logs refusals without letting a client flood the log: the first breach of each kind in
/// an interval is logged at once; the rest are counted, and the count goes out with the
/// next line of that kind after the interval, or with ``flush()`` (which the server calls
/// once per interval) if none comes. Thread-safe.
///
/// A breach (`breach=KIND` in the log) is a limit or a policy a peer ran into. Ordinary
/// events that a peer can repeat at will (a connection dropped without a TLS close, a launch
/// of a scheme nobody declared, an open of a package that is not there) are counted the same
/// way but logged as `event=KIND`, so that normal use does not read as an attack.
final class BreachLog: Sendable {
    private let logger: Logger
    private let interval: TimeAmount
    private let windows = Mutex<[String: Window]>([:])
    /// Counts each refusal by kind, with `--metrics`.
    private let metrics: HostMetrics?

    /// The most kinds counted apart in one interval.
    static let maxKinds = 256

    struct Window {
        var opened: NIODeadline
        var suppressed: Int
        var isBreach = true
    }

    init(logger: Logger, interval: Duration, metrics: HostMetrics? = nil) {
        self.logger = logger
        self.metrics = metrics

        self.interval = TimeAmount(interval)
    }

    /// Records one breach of `kind`; logs `message` unless a line of that kind went out less
    /// than an interval ago. Returns whether it was logged.
    /// With `isBreach` false, an ordinary event, logged as `event=KIND`.
    @discardableResult
    func record(
        _ kind: String, level: Logger.Level = .warning, _ message: @autoclosure () -> String,
        metadata: Logger.Metadata = [:], isBreach: Bool = true
    ) -> Bool {
        let now = NIODeadline.now()
        let suppressed = windows.withLock { windows -> Int? in
            // Kinds may carry peer-chosen text (a scheme): past a bound they share one window,
            // so that the table cannot grow without limit.
            let kind = windows[kind] != nil || windows.count < Self.maxKinds ? kind : "(other kinds)"
            metrics?.refused(kind)
            if let window = windows[kind], now - window.opened < interval {
                windows[kind]!.suppressed += 1
                return nil
            }
            let before = windows[kind]?.suppressed ?? 0
            windows[kind] = Window(opened: now, suppressed: 0, isBreach: isBreach)
            return before
        }
        guard let suppressed else { return false }
        emit(kind, level: level, message(), metadata: metadata, suppressed: suppressed, isBreach: isBreach)
        return true
    }

    /// Logs, for each kind whose interval has passed with breaches left uncounted, how many
    /// there were: so that the end of a flood is counted too.
    func flush() {
        let now = NIODeadline.now()
        let due = windows.withLock { windows -> [(String, Window)] in
            var due: [(String, Window)] = []
            for (kind, window) in windows where now - window.opened >= interval {
                if window.suppressed > 0 { due.append((kind, window)) }
                windows[kind] = nil
            }
            return due
        }
        for (kind, window) in due.sorted(by: { $0.0 < $1.0 }) {
            logger.notice(
                "\(window.suppressed) more of \"\(kind)\" in the last interval",
                metadata: [window.isBreach ? "breach" : "event": "\(kind)"])
        }
    }

    private func emit(
        _ kind: String, level: Logger.Level, _ message: String, metadata: Logger.Metadata, suppressed: Int,
        isBreach: Bool
    ) {
        var metadata = metadata
        metadata[isBreach ? "breach" : "event"] = "\(kind)"
        if suppressed > 0 { metadata["more since last logged"] = "\(suppressed)" }
        logger.log(level: level, "\(message)", metadata: metadata)
    }
}
