public import AtriumValues
public import Foundation
public import NIOCore

// The frames of transfers (CONTRACT section 8). A transfer is named by its uuid (`transfer`);
// `chunk` and `ack` go both ways.

/// `chunk`: bytes of a transfer at `offset`; the last of an upload carries `last` (and the
/// file's SHA-256 as `digest`, when the client knows it).
public struct ChunkFrame: Sendable, Hashable {
    public var transfer: UUID
    public var offset: UInt64
    /// The bytes: a slice of the frame as it was read, not a copy.
    public var data: ByteBuffer
    public var last: Bool
    public var digest: [UInt8]?

    public init(transfer: UUID, offset: UInt64, data: ByteBuffer, last: Bool = false, digest: [UInt8]? = nil) {
        self.transfer = transfer
        self.offset = offset
        self.data = data
        self.last = last
        self.digest = digest
    }
}

/// `ack`: the receiver holds `offset` bytes (an upload's: on the host's stable storage) and
/// takes `window` more past them.
public struct AckFrame: Sendable, Hashable {
    public var transfer: UUID
    public var offset: UInt64
    public var window: UInt64

    public init(transfer: UUID, offset: UInt64, window: UInt64) {
        self.transfer = transfer
        self.offset = offset
        self.window = window
    }
}

/// `attach`: the client takes up a transfer on this connection (and, for a download, says how
/// many bytes it holds and how many more it takes now).
public struct AttachFrame: Sendable, Hashable {
    public var id: UInt64
    public var transfer: UUID
    public var offset: UInt64?
    public var window: UInt64?

    public init(id: UInt64, transfer: UUID, offset: UInt64? = nil, window: UInt64? = nil) {
        self.id = id
        self.transfer = transfer
        self.offset = offset
        self.window = window
    }
}

/// `transfers`: the client asks for its transfers changed since `since` (all without it), and
/// forgets the ended ones in `forget`.
public struct TransfersQueryFrame: Sendable, Hashable {
    public var id: UInt64
    public var since: UInt64?
    public var forget: [UUID]

    public init(id: UInt64, since: UInt64? = nil, forget: [UUID] = []) {
        self.id = id
        self.since = since
        self.forget = forget
    }
}

/// `transferLink` (host to client): the answer to the client's `transferLink`, a URL and a
/// bearer that reach the transfer over HTTPS until `expires`.
public struct TransferLinkFrame: Sendable, Hashable {
    public var id: UInt64
    /// As `attached`'s: Success (0); Failure (1) with `error`; ResourceLimitsExceeded (2).
    public var status: AppServiceResponseStatus
    /// Empty when refused.
    public var url: String
    /// Empty when refused.
    public var bearer: String
    public var expires: Timestamp
    public var error: String?

    public init(
        id: UInt64, status: AppServiceResponseStatus, url: String, bearer: String, expires: Timestamp,
        error: String? = nil
    ) {
        self.id = id
        self.status = status
        self.url = url
        self.bearer = bearer
        self.expires = expires
        self.error = error
    }
}

/// A transfer frame a client sends.
public enum ClientTransferFrame: Sendable, Hashable {
    case attach(AttachFrame)
    case chunk(ChunkFrame)
    case ack(AckFrame)
    case detach(transfer: UUID)
    case cancel(transfer: UUID)
    case transfers(TransfersQueryFrame)
    /// `transferLink`: a URL and bearer for the transfer over HTTPS.
    case link(id: UInt64, transfer: UUID)

    /// The uuid the frame names, if it names one.
    public var transfer: UUID? {
        switch self {
        case .attach(let attach): attach.transfer
        case .chunk(let chunk): chunk.transfer
        case .ack(let ack): ack.transfer
        case .detach(let transfer), .cancel(let transfer): transfer
        case .link(_, let transfer): transfer
        case .transfers: nil
        }
    }
}

/// `attached`: the answer to `attach`.
public struct AttachedFrame: Sendable, Hashable {
    public var id: UInt64
    public var transfer: UUID
    /// Success (0); Failure (1) with `error` `notFound` or `ended`; ResourceLimitsExceeded (2).
    public var status: AppServiceResponseStatus
    /// `download` or `upload`.
    public var direction: String
    /// -1 for an upload whose size is not known until its last chunk.
    public var size: Int64
    /// Where the bytes go on from: a download's is the client's, an upload's what the host holds.
    public var offset: UInt64
    public var chunkBytes: UInt64
    /// An upload's: the bytes past `offset` the client may send now.
    public var window: UInt64
    public var expires: Timestamp
    public var name: String?
    public var digest: [UInt8]?
    public var error: String?

    public init(
        id: UInt64, transfer: UUID, status: AppServiceResponseStatus, direction: String, size: Int64, offset: UInt64,
        chunkBytes: UInt64, window: UInt64, expires: Timestamp, name: String? = nil, digest: [UInt8]? = nil,
        error: String? = nil
    ) {
        self.id = id
        self.transfer = transfer
        self.status = status
        self.direction = direction
        self.size = size
        self.offset = offset
        self.chunkBytes = chunkBytes
        self.window = window
        self.expires = expires
        self.name = name
        self.digest = digest
        self.error = error
    }
}

/// `transferState`: where a transfer stands (sent on every change, and each second while bytes
/// move); also each entry of a `transfers` answer.
public struct TransferStateFrame: Sendable, Hashable {
    public var transfer: UUID
    /// `waiting`, `running`, `verifying`, `delivering`, `completed`, `failed`, `canceled`,
    /// `expired`.
    public var state: String
    public var offset: UInt64
    public var size: Int64
    public var error: String?
    /// What the service answered once it took a finished upload.
    public var result: EncodedValueSet?

    public init(
        transfer: UUID, state: String, offset: UInt64, size: Int64, error: String? = nil,
        result: EncodedValueSet? = nil
    ) {
        self.transfer = transfer
        self.state = state
        self.offset = offset
        self.size = size
        self.error = error
        self.result = result
    }
}

/// `transfers`: the answer to the client's `transfers`.
public struct TransfersFrame: Sendable, Hashable {
    public var id: UInt64
    public var transfers: [TransferStateFrame]
    /// What to send as `since` next time.
    public var cursor: UInt64

    public init(id: UInt64, transfers: [TransferStateFrame], cursor: UInt64) {
        self.id = id
        self.transfers = transfers
        self.cursor = cursor
    }
}

/// A transfer frame the host sends.
public enum HostTransferFrame: Sendable, Hashable {
    case attached(AttachedFrame)
    case chunk(ChunkFrame)
    case ack(AckFrame)
    case state(TransferStateFrame)
    case transfers(TransfersFrame)
    case link(TransferLinkFrame)
}
