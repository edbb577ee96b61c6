import Logging
import NIOCore
import Synchronization

/// Logs refusals without letting a client flood the log: the first breach of each kind in
/// an interval is logged at once; the rest are counted, and the count goes out with the
/// next line of that kind after the interval. Thread-safe.
final class BreachLog: Sendable {
    private let logger: Logger
    private let interval: TimeAmount
    private let windows = Mutex<[String: Window]>([:])

    struct Window {
        var opened: NIODeadline
        var suppressed: Int
    }

    init(logger: Logger, interval: Duration) {
        self.logger = logger
        
        self.interval = TimeAmount(interval)
    }

    /// Records one breach of `kind`; logs `message` unless a line of that kind went out less
    /// than an interval ago. Returns whether it was logged.
    @discardableResult
    func record(
        _ kind: String, level: Logger.Level = .warning, _ message: @autoclosure () -> String,
        metadata: Logger.Metadata = [:]
    ) -> Bool {
        let now = NIODeadline.now()
        let suppressed = windows.withLock { windows -> Int? in
            if let window = windows[kind], now - window.opened < interval {
                windows[kind]!.suppressed += 1
                return nil
            }
            let before = windows[kind]?.suppressed ?? 0
            windows[kind] = Window(opened: now, suppressed: 0)
            return before
        }
        guard let suppressed else { return false }
        var metadata = metadata
        metadata["breach"] = "\(kind)"
        if suppressed > 0 { metadata["more since last logged"] = "\(suppressed)" }
        logger.log(level: level, "\(message())", metadata: metadata)
        return true
    }
}
