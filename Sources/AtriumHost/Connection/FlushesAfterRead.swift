import NIOPosix

/// The connections written to while a worker's link is read on this thread
/// (``WorkerLinkHandler``), flushed together once the frames of that read are handled: the
/// answers one read from a worker brings (up to a few dozen, for pipelining clients) cost each
/// connection one flush, one system call, not one an answer. Everything here happens on one
/// thread (an event loop's): an instance is its thread's alone, hence the unchecked Sendable.
final class FlushesAfterRead: @unchecked Sendable {
    private static let onThisThread = ThreadSpecificVariable<FlushesAfterRead>()
    private var reading = false
    private var written: [any FlushedLater] = []

    /// Runs `body`, which hands on the frames of one read, with the flushes of the connections
    /// it writes to put off until it returns (or throws).
    static func collecting<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
        let flushes: FlushesAfterRead
        if let existing = onThisThread.currentValue {
            flushes = existing
        } else {
            flushes = FlushesAfterRead()
            onThisThread.currentValue = flushes
        }
        // A read handled inside another's: the outer one flushes.
        guard !flushes.reading else { return try body() }
        flushes.reading = true
        defer {
            flushes.reading = false
            if !flushes.written.isEmpty {
                // Taken whole, so that a flush that leads to more writes finds an empty list (and
                // flushes those at once), then given back empty: its storage serves the next read.
                var written: [any FlushedLater] = []
                swap(&written, &flushes.written)
                for connection in written { connection.flushIfPending() }
                written.removeAll(keepingCapacity: true)
                flushes.written = written
            }
        }
        return try body()
    }

    /// Whether a read is being handled on this thread (``collecting(_:)``); then `connection` is
    /// flushed when it is done.
    static func flushLater(_ connection: any FlushedLater) -> Bool {
        guard let flushes = onThisThread.currentValue, flushes.reading else { return false }
        flushes.written.append(connection)
        return true
    }
}

/// What ``FlushesAfterRead`` flushes: a connection (``ConnectionHandler``).
protocol FlushedLater: AnyObject {
    /// Flushes what was written and not flushed yet, if anything.
    func flushIfPending()
}
