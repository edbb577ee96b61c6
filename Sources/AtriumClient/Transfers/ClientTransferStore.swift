import AtriumTLS
public import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What a client keeps of a transfer it started, to resume it from a later process and to show
/// it (`atrium transfers`): which host, service and local file, and how it stood last.
public struct ClientTransferRecord: Codable, Sendable, Equatable {
    public var transfer: UUID
    /// `download` or `upload`.
    public var direction: String
    /// The host as it was named (an address, a socket, a discovered name).
    public var host: String
    public var package: String
    public var service: String
    /// The local file: a download's destination, an upload's source.
    public var path: String
    /// The size, when known (-1 otherwise).
    public var size: Int64
    /// Where it stood when this client last heard (CONTRACT section 8's states).
    public var state: String
    public var error: String?
    /// The service's result, as JSON text.
    public var result: String?
    public var created: Date
    public var updated: Date

    public init(
        transfer: UUID, direction: String, host: String, package: String, service: String, path: String,
        size: Int64, state: String = "waiting", now: Date = Date()
    ) {
        self.transfer = transfer
        self.direction = direction
        self.host = host
        self.package = package
        self.service = service
        self.path = path
        self.size = size
        self.state = state
        created = now
        updated = now
    }

    public var hasEnded: Bool { ["completed", "failed", "canceled", "expired"].contains(state) }
}

/// The transfers a client started, one JSON file each in its state folder
/// (`$XDG_STATE_HOME/atrium/client-transfers`, private to the user), each replaced whole by a
/// rename: a crash leaves the old record or the new one. An unfinished download's bytes wait
/// beside its record (`ID.part`).
public struct ClientTransferStore: Sendable {
    public let folder: URL

    /// The store in `folder`; by default the user's (`$XDG_STATE_HOME/atrium/client-transfers`).
    public init(folder: URL? = nil) {
        self.folder = folder ?? TLSIdentity.defaultStateFolder().appendingPathComponent("client-transfers")
    }

    public func save(_ record: ClientTransferRecord) throws {
        try FileManager.default.createDirectory(
            at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        var record = record
        record.updated = Date()
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        let data = try encoder.encode(record)
        let file = folder.appendingPathComponent("\(record.transfer.uuidString.lowercased()).json")
        try data.write(to: file, options: .atomic)
    }

    /// Every record, newest first; files that are not records are left out.
    public func all() -> [ClientTransferRecord] {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        return names.filter { $0.hasSuffix(".json") }.compactMap { name in
            guard let data = try? Data(contentsOf: folder.appendingPathComponent(name)) else { return nil }
            return try? decoder.decode(ClientTransferRecord.self, from: data)
        }.sorted { $0.created > $1.created }
    }

    /// The record of `transfer`, by its id or a prefix of it (as a person types it).
    public func find(_ text: String) -> [ClientTransferRecord] {
        let prefix = text.lowercased()
        return all().filter { $0.transfer.uuidString.lowercased().hasPrefix(prefix) }
    }

    /// The unfinished transfer of the same kind, to the same service, of the same local file:
    /// what running a command again resumes.
    public func unfinished(direction: String, host: String, package: String, service: String, path: String)
        -> ClientTransferRecord?
    {
        all().first {
            !$0.hasEnded && $0.direction == direction && $0.host == host && $0.package == package
                && $0.service == service && $0.path == path
        }
    }

    /// The name of a download's partial file (`ID.part`), beside its record.
    public static func partialName(of transfer: UUID) -> String { "\(transfer.uuidString.lowercased()).part" }

    /// Where ``DownloadOperation`` keeps the bytes of `transfer` until it completes.
    public func partialFile(of transfer: UUID) -> URL {
        folder.appendingPathComponent(Self.partialName(of: transfer), isDirectory: false)
    }

    /// Removes the record of `transfer`, and its partial bytes.
    public func remove(_ transfer: UUID) {
        unlink(folder.appendingPathComponent("\(transfer.uuidString.lowercased()).json").path)
        unlink(partialFile(of: transfer).path)
    }
}
