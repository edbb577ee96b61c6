/// The rules of a download's bytes on one attachment: the host sends from the client's offset,
/// never past the client's window beyond what it acknowledged (nor past the host's own limit of
/// bytes unacknowledged); the client's `ack` moves the window. Plain state: the host asks
/// ``nextChunk(maxBytes:)`` what to read and send, and hands it each `ack`.
public struct DownloadWindow: Sendable, Equatable {
    public let size: Int64
    /// Bytes the client holds (its last `ack`, or the `attach` offset).
    public private(set) var acknowledged: Int64
    /// The next byte to send.
    public private(set) var sent: Int64
    /// The bytes past ``acknowledged`` the host may send: the client's window, within the
    /// host's limit.
    public private(set) var window: Int64
    private let maxWindow: Int64
    /// Set after a refusal: nothing more moves until a new `attach`.
    public private(set) var refused: TransferErrorCode?

    /// An attachment of a download of `size` bytes of which the client holds `offset`, with
    /// its `window`, never more than `maxWindow`. Nil when `offset` is past the end or negative.
    public init?(size: Int64, offset: Int64, window: Int64, maxWindow: Int64) {
        guard offset >= 0, offset <= size, window >= 0 else { return nil }
        self.size = size
        acknowledged = offset
        sent = offset
        self.maxWindow = maxWindow
        self.window = min(window, maxWindow)
    }

    /// The bytes to send next, at most `maxBytes` (a chunk), or nil while the window is full,
    /// everything was sent, or after a refusal.
    public mutating func nextChunk(maxBytes: Int) -> Range<Int64>? {
        guard refused == nil else { return nil }
        // In differences, not sums: nothing here overflows, whatever the window.
        let limit = acknowledged + min(window, size - acknowledged)
        guard sent < limit, maxBytes > 0 else { return nil }
        let end = sent + min(limit - sent, Int64(maxBytes))
        defer { sent = end }
        return sent..<end
    }

    /// What an `ack` leads to.
    public enum AckVerdict: Sendable, Equatable {
        /// The window moved.
        case moved
        /// The client holds every byte: the download is complete.
        case complete
        /// An offset that moves back, or past what was sent: the transfer waits for a new `attach`.
        case refuse(TransferErrorCode)
        /// An ack after a refusal: nothing.
        case ignore
    }

    /// The client holds `offset` bytes and grants `window` more.
    public mutating func ack(offset: Int64, window: Int64) -> AckVerdict {
        guard refused == nil else { return .ignore }
        guard offset >= acknowledged, offset <= sent, window >= 0 else {
            refused = .offsetMismatch
            return .refuse(.offsetMismatch)
        }
        acknowledged = offset
        self.window = min(window, maxWindow)
        return offset == size ? .complete : .moved
    }

    /// Whether the client holds every byte.
    public var isComplete: Bool { acknowledged == size }

    /// Bytes sent and not yet acknowledged: what the host counts against its limits.
    public var inFlight: Int64 { sent - acknowledged }
}
