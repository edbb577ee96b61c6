public import Foundation

/// Everything the host keeps of one transfer, and what its journal holds on disk: enough to
/// resume it after a restart and to tell its caller how it ended.
public struct TransferRecord: Sendable, Codable, Equatable {
    public let id: TransferID
    public let owner: TransferOwner
    public let direction: TransferDirection
    /// The package and service that made it (a revoked access to the service ends it).
    public let package: String
    public let service: String
    /// The file's name as the service gave it, for display only: never a path.
    public var name: String?
    /// Its size in bytes; -1 for an upload whose size is not known until its `last` chunk.
    public var size: Int64
    /// The most an upload of unknown size may grow to (the service's maximum).
    public var maxSize: Int64
    /// Where the bytes stand: an upload's bytes on stable storage, or a download's bytes the
    /// client acknowledged.
    public var offset: Int64
    /// The SHA-256 of the whole file, when it is known (a download's, an upload's once checked
    /// or announced by its client).
    public var digest: [UInt8]?
    public var phase: TransferPhase
    /// Why it failed, or why it waits.
    public var error: TransferErrorCode?
    /// What the service answered once it took the finished upload (a ValueSet's CBOR bytes;
    /// base64 in the journal, so that a result of a whole message fits a record). Bytes, not
    /// `Data`: a `Data` of more than a few bytes keeps its storage behind a pointer with an
    /// enum's tag bits in it, which LeakSanitizer cannot follow.
    @Base64Bytes public var result: [UInt8]?
    /// The SHA-256 an upload's client sent with its last chunk, kept from then until the file is
    /// checked against it (also across a restart).
    public var clientDigest: [UInt8]?
    public var created: Date
    /// When bytes last moved (or it was made): the expiry counts from here.
    public var lastProgress: Date
    public var ended: Date?
    /// The table's change number at its last change: what `transfers` with `since` compares.
    public var sequence: UInt64
    /// A download's file, as it was offered: opened again from here after a restart.
    public var source: DownloadSource?
    /// The links that reach it over HTTPS (`transferLink`), newest last: each bearer's SHA-256,
    /// never the bearer itself, and when it stops admitting.
    public var links: [TransferLink]?

    public init(
        id: TransferID = TransferID(), owner: TransferOwner, direction: TransferDirection, package: String,
        service: String, name: String? = nil, size: Int64, maxSize: Int64 = -1, digest: [UInt8]? = nil,
        source: DownloadSource? = nil, now: Date
    ) {
        self.id = id
        self.owner = owner
        self.direction = direction
        self.package = package
        self.service = service
        self.name = name
        self.size = size
        self.maxSize = maxSize
        offset = 0
        self.digest = digest
        self.source = source
        phase = .waiting
        created = now
        lastProgress = now
        sequence = 0
    }

    /// The bytes of an unfinished upload the spool holds or has reserved for it.
    public var spoolBytes: Int64 {
        guard direction == .upload, !phase.isEnded else { return 0 }
        return size >= 0 ? size : offset
    }
}

/// A bearer that admits its client to one transfer over HTTPS until `expires`: kept as the
/// SHA-256 of the bearer, so that the journal on disk holds nothing that admits anyone.
public struct TransferLink: Sendable, Codable, Equatable {
    public var digest: [UInt8]
    public var expires: Date

    public init(digest: [UInt8], expires: Date) {
        self.digest = digest
        self.expires = expires
    }
}

/// Optional bytes kept as base64 text when encoded (as `Data` is), and read back from base64
/// text, `null` or a missing key.
@propertyWrapper
public struct Base64Bytes: Codable, Sendable, Equatable {
    public var wrappedValue: [UInt8]?

    public init(wrappedValue: [UInt8]?) {
        self.wrappedValue = wrappedValue
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        wrappedValue = container.decodeNil() ? nil : Array(try container.decode(Data.self))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue { try container.encode(Data(wrappedValue)) } else { try container.encodeNil() }
    }
}

extension KeyedDecodingContainer {
    /// A record from before the key existed, or written without it, has no bytes.
    public func decode(_ type: Base64Bytes.Type, forKey key: Key) throws -> Base64Bytes {
        try decodeIfPresent(type, forKey: key) ?? Base64Bytes(wrappedValue: nil)
    }
}
