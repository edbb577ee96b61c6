/// The rules of an upload's bytes on one attachment (CONTRACT section 8): chunks in order from
/// the agreed offset, never past the window the host granted beyond what it holds on stable
/// storage, never more than the size (or the service's maximum); an `ack` only for bytes on
/// stable storage. Plain state: the host writes what ``chunk(offset:count:last:)`` says to
/// write, syncs, and sends the `ack` that ``synced(through:)`` returns.
public struct UploadWindow: Sendable, Equatable {
    /// Bytes written to the spool file, synced or not: where the next chunk must start.
    public private(set) var written: Int64
    /// Bytes on stable storage: what an `ack` may say, and where a resumed upload goes on from.
    public private(set) var held: Int64
    /// The announced size, or -1.
    public let size: Int64
    /// The most bytes an upload of unknown size may have; -1 for no maximum of its own (the
    /// spool's limits bound it).
    public let maxSize: Int64
    /// The bytes past ``held`` the client may send.
    public let window: Int64
    /// Whether the client sent its `last` chunk.
    public private(set) var lastReceived = false
    /// The digest the client sent with its `last` chunk, if any.
    public private(set) var announcedDigest: [UInt8]?
    /// Set after a refusal: nothing more is taken until a new `attach` (a new window).
    public private(set) var refused: TransferErrorCode?

    /// An attachment of an upload that holds `held` bytes on stable storage. Bytes written past
    /// them and not synced are written again: a resumed upload goes on from `held`.
    public init(held: Int64, size: Int64, maxSize: Int64, window: Int64) {
        self.held = held
        written = held
        self.size = size
        self.maxSize = maxSize
        self.window = window
    }

    /// What to do with a chunk.
    public enum Verdict: Sendable, Equatable {
        /// Write its bytes at this offset of the spool file.
        case write(at: Int64)
        /// Take nothing; tell the client why. The transfer waits for a new `attach`.
        case refuse(TransferErrorCode)
        /// Take nothing, and the transfer fails.
        case fail(TransferErrorCode)
        /// Nothing: a chunk after a refusal, before the new `attach`.
        case ignore
    }

    /// A chunk of `count` bytes at `offset`; `last` ends the upload, with `digest` if the client
    /// knows it. `count` is at most `chunkBytes` (the frame's check).
    public mutating func chunk(offset: Int64, count: Int, last: Bool, digest: [UInt8]? = nil) -> Verdict {
        guard refused == nil, !lastReceived else { return .ignore }
        // The offset is checked first: from here on it is `written`, so nothing below can
        // overflow, whatever the client sent.
        guard offset == written, count >= 0 else { return refuse(.offsetMismatch) }
        let count = Int64(count)
        if size >= 0 {
            guard count <= size - offset else { return .fail(.lengthExceeded) }
            guard !last || count == size - offset else { return .fail(.lengthExceeded) }
        } else if maxSize >= 0 {
            guard count <= maxSize - offset else { return .fail(.lengthExceeded) }
        }
        // Unsynced bytes already sent take part of the window.
        guard count <= window - (offset - held) else { return refuse(.windowExceeded) }
        let end = offset + count
        written = end
        if last || (size >= 0 && end == size) {
            lastReceived = true
            announcedDigest = digest
        }
        return .write(at: offset)
    }

    private mutating func refuse(_ code: TransferErrorCode) -> Verdict {
        refused = code
        return .refuse(code)
    }

    /// The spool file is on stable storage through `offset` (at most ``written``): the `ack`
    /// to send, the window measured from it.
    public mutating func synced(through offset: Int64) -> (offset: Int64, window: Int64) {
        held = max(held, min(offset, written))
        return (held, window)
    }

    /// Whether every byte is in and on stable storage: the upload can be checked.
    public var isComplete: Bool { lastReceived && held == written }

    /// The upload's size once it is complete.
    public var finalSize: Int64 { written }
}

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
