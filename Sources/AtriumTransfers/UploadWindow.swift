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
    public private(set) var window: Int64
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

    /// Grants `window` bytes past ``held`` from the next `ack` on, but never less than the
    /// client was already allowed: the right edge of the window (``held`` plus it) never moves
    /// back, so a chunk the client sent within its last window is never refused.
    public mutating func grant(_ window: Int64) {
        let edge = held &+ self.window
        self.window = max(max(window, 0), edge &- held)
    }

    /// Whether every byte is in and on stable storage: the upload can be checked.
    public var isComplete: Bool { lastReceived && held == written }

    /// The upload's size once it is complete.
    public var finalSize: Int64 { written }
}
