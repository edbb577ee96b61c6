public import Foundation

/// A transfer's id (CONTRACT section 8: the value `Transfer` in the answer that made it): a
/// random UUID, so that a caller cannot guess another's.
public struct TransferID: Hashable, Sendable, Codable, CustomStringConvertible {
    public let uuid: UUID

    /// A new, random id (version 4): 122 bits from the system's generator (`getrandom`), with
    /// none of the file opening Foundation's `UUID()` does for each one here.
    public init() {
        var generator = SystemRandomNumberGenerator()
        var bytes = (generator.next() as UInt64, generator.next() as UInt64)
        withUnsafeMutableBytes(of: &bytes) { raw in
            raw[6] = raw[6] & 0x0F | 0x40  // version 4
            raw[8] = raw[8] & 0x3F | 0x80  // the RFC's variant
        }
        uuid = UUID(uuid: withUnsafeBytes(of: bytes) { $0.load(as: uuid_t.self) })
    }

    public init(_ uuid: UUID) { self.uuid = uuid }

    /// The id written as text (any case); nil when `text` is not a UUID.
    public init?(_ text: String) {
        guard let uuid = UUID(uuidString: text) else { return nil }
        self.uuid = uuid
    }

    /// Lowercase, as RFC 9562 writes it: also the name of the transfer's files in the spool.
    public var description: String { uuid.uuidString.lowercased() }
}

/// Which way the bytes go, seen from the client.
public enum TransferDirection: String, Sendable, Codable {
    /// The service offered a file; the host sends it.
    case download
    /// The service accepts a file; the client sends it.
    case upload
}

/// Where a transfer stands (CONTRACT section 8, `transferState.state`).
public enum TransferPhase: String, Sendable, Codable, CaseIterable {
    /// Made, or detached: nobody moves its bytes now.
    case waiting
    /// Attached, and bytes may move.
    case running
    /// An upload's bytes are all there: their size and digest are being checked.
    case verifying
    /// An upload checked and being handed to its service, which has not answered yet.
    case delivering
    case completed
    case failed
    case canceled
    /// No progress for the expiry: its partial bytes are gone.
    case expired

    /// Whether nothing more will happen to the transfer but being forgotten.
    public var isEnded: Bool {
        switch self {
        case .completed, .failed, .canceled, .expired: true
        case .waiting, .running, .verifying, .delivering: false
        }
    }
}

/// Why a transfer frame was refused, or a transfer ended (CONTRACT section 8, `error`).
public enum TransferErrorCode: String, Sendable, Codable, CaseIterable, Error {
    /// No such transfer for this caller (another caller's is not found either).
    case notFound
    /// The transfer has ended: nothing is left to move.
    case ended
    /// A later `attach` took the transfer to another connection.
    case attachedElsewhere
    /// A chunk that does not start at the next byte, or an `ack` that moves back or past what
    /// was sent: the transfer waits for a new `attach`.
    case offsetMismatch
    /// Bytes past the receiver's window: the transfer waits for a new `attach`.
    case windowExceeded
    /// An upload's length does not match its size (more bytes than `size`, or its `last`
    /// chunk before `size`), or goes past the service's maximum: the transfer fails.
    case lengthExceeded
    /// The SHA-256 of an upload's bytes is not the `digest` its client sent: the transfer
    /// fails, and nothing is handed to the service.
    case digestMismatch
    /// The host has no room for the upload (its spool limits, or the disk's free space).
    case insufficientStorage
    /// A download's file changed on the host while it was being sent: the transfer fails.
    case changed
    /// No progress for the expiry.
    case expired
    /// The service failed to take the finished upload, or to offer the file.
    case serviceFailed
}

/// Who a transfer belongs to (CONTRACT section 8): the caller's TLS identity, else its token,
/// else its local user (the Unix socket), else (plain TCP on loopback) its `clientId`. For
/// any other caller the transfer does not exist.
public enum TransferOwner: Hashable, Sendable, Codable, CustomStringConvertible {
    case identity(String)
    case token(String)
    case localUser(UInt32)
    case client(String)

    public var description: String {
        switch self {
        case .identity(let identity): "device \(identity.prefix(16))"
        case .token(let name): "token \(name)"
        case .localUser(let uid): "local user \(uid)"
        case .client(let id): "client \(id)"
        }
    }
}
