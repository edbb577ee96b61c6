public import Foundation

/// The host's transfers: who owns each, which connection has it attached, what changed since a
/// caller last asked, and the limits per caller and in all (CONTRACT section 8). Plain state:
/// the host holds it under one lock, journals each record it returns as changed, and acts on
/// what the calls return (tell a displaced connection, delete a transfer's files).
///
/// Ownership is checked on every call that names a transfer: another caller's transfer is
/// ``TransferErrorCode/notFound``, exactly as one that does not exist.
public struct TransferTable: Sendable {
    public let limits: TransferLimits
    private var records: [TransferID: TransferRecord] = [:]
    /// Which connection has each transfer attached.
    private var attachedTo: [TransferID: UInt64] = [:]
    /// The last change number given out: every change takes the next.
    public private(set) var sequence: UInt64 = 0

    public init(limits: TransferLimits, records: [TransferRecord] = []) {
        self.limits = limits
        for var record in records {
            // Nothing is attached after a restart: a running transfer waits for its client.
            if record.phase == .running { record.phase = .waiting }
            self.records[record.id] = record
            sequence = max(sequence, record.sequence)
        }
    }

    public var count: Int { records.count }

    /// A caller's transfer, or nil when it has none of that id.
    public func find(_ id: TransferID, owner: TransferOwner) -> TransferRecord? {
        guard let record = records[id], record.owner == owner else { return nil }
        return record
    }

    /// Every transfer (for a sweep's files, or shutdown).
    public var all: [TransferRecord] { Array(records.values) }

    // MARK: - Making a transfer

    /// Why a transfer may not be made.
    public enum Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        case tooManyOfCaller(Int)
        case tooMany(Int)
        case spoolOfCaller(Int64)
        case spool(Int64)

        public var description: String {
            switch self {
            case .tooManyOfCaller(let limit): "the caller has \(limit) unfinished transfers, its limit"
            case .tooMany(let limit): "the host has \(limit) unfinished transfers, its limit"
            case .spoolOfCaller(let limit): "the caller's unfinished uploads would hold over \(limit) bytes, its limit"
            case .spool(let limit): "unfinished uploads would hold over \(limit) bytes on the host, its limit"
            }
        }
    }

    /// Adds `record` (a service offered a file or accepted one), within the limits.
    public mutating func add(_ record: TransferRecord) -> Result<TransferRecord, Refusal> {
        let unfinished = records.values.filter { !$0.phase.isEnded }
        guard unfinished.count < limits.unfinished else { return .failure(.tooMany(limits.unfinished)) }
        let ofCaller = unfinished.filter { $0.owner == record.owner }
        guard ofCaller.count < limits.unfinishedPerCaller else {
            return .failure(.tooManyOfCaller(limits.unfinishedPerCaller))
        }
        if record.direction == .upload {
            // An upload of known size reserves it all; one of unknown size counts as it grows.
            let adds = max(record.size, 0)
            guard ofCaller.reduce(0, { $0 + $1.spoolBytes }) + adds <= limits.spoolBytesPerCaller else {
                return .failure(.spoolOfCaller(limits.spoolBytesPerCaller))
            }
            guard unfinished.reduce(0, { $0 + $1.spoolBytes }) + adds <= limits.spoolBytes else {
                return .failure(.spool(limits.spoolBytes))
            }
        }
        var record = record
        sequence += 1
        record.sequence = sequence
        records[record.id] = record
        return .success(record)
    }

    /// Whether an upload of unknown size may grow to `offset` bytes within the spool limits.
    public func mayGrow(_ id: TransferID, to offset: Int64) -> Bool {
        guard let record = records[id] else { return false }
        let unfinished = records.values.filter { !$0.phase.isEnded }
        let growth = max(offset - record.spoolBytes, 0)
        let ofCaller = unfinished.filter { $0.owner == record.owner }.reduce(0) { $0 + $1.spoolBytes }
        return ofCaller + growth <= limits.spoolBytesPerCaller
            && unfinished.reduce(0, { $0 + $1.spoolBytes }) + growth <= limits.spoolBytes
    }

    // MARK: - Attaching

    /// What an `attach` found.
    public struct Attachment: Sendable, Equatable {
        public var record: TransferRecord
        /// The connection that had the transfer attached before, to be told `attachedElsewhere`.
        public var displaced: UInt64?
    }

    /// Why an `attach` is refused.
    public enum AttachRefusal: Error, Sendable, Equatable {
        case notFound
        /// The transfer ended: its outcome is in the record.
        case ended(TransferRecord)
        /// Too many transfers attached on this connection, or by this caller.
        case tooManyOnConnection(Int)
        case tooManyOfCaller(Int)
    }

    /// Attaches transfer `id` of `owner` to `connection`: the latest attach wins.
    public mutating func attach(_ id: TransferID, owner: TransferOwner, connection: UInt64, now: Date)
        -> Result<Attachment, AttachRefusal>
    {
        guard var record = find(id, owner: owner) else { return .failure(.notFound) }
        guard !record.phase.isEnded else { return .failure(.ended(record)) }
        let previous = attachedTo[id]
        if previous != connection {
            let onConnection = attachedTo.values.filter { $0 == connection }.count
            guard onConnection < limits.attachedPerConnection else {
                return .failure(.tooManyOnConnection(limits.attachedPerConnection))
            }
            // The caller's other attachments, not counting this transfer's own.
            let ofCaller = attachedTo.keys.filter { $0 != id && records[$0]?.owner == owner }.count
            guard ofCaller < limits.attachedPerCaller else {
                return .failure(.tooManyOfCaller(limits.attachedPerCaller))
            }
        }
        attachedTo[id] = connection
        if record.phase == .waiting {
            record.phase = .running
            record.error = nil
            record.lastProgress = now
            store(&record)
        }
        return .success(Attachment(record: record, displaced: previous == connection ? nil : previous))
    }

    /// The connection attached to transfer `id`, if any.
    public func connection(of id: TransferID) -> UInt64? { attachedTo[id] }

    /// Detaches transfer `id` from `connection` (a `detach`, a refusal that waits for a new
    /// attach, or the connection gone): it waits, resumable. Nil when that connection did not
    /// have it attached (a later attach took it).
    public mutating func detach(_ id: TransferID, from connection: UInt64, error: TransferErrorCode? = nil)
        -> TransferRecord?
    {
        guard attachedTo[id] == connection, var record = records[id] else { return nil }
        attachedTo[id] = nil
        guard record.phase == .running else { return record }
        record.phase = .waiting
        record.error = error
        store(&record)
        return record
    }

    /// Detaches every transfer of `connection` (it closed); returns those it had.
    public mutating func connectionClosed(_ connection: UInt64) -> [TransferRecord] {
        let ids = attachedTo.filter { $0.value == connection }.map(\.key)
        return ids.compactMap { detach($0, from: connection) }
    }

    // MARK: - Progress and outcomes

    /// Bytes moved: an upload's bytes on stable storage, or a download's acknowledged.
    public mutating func progressed(_ id: TransferID, offset: Int64, now: Date) -> TransferRecord? {
        guard var record = records[id], !record.phase.isEnded, offset >= record.offset else { return nil }
        record.offset = offset
        record.lastProgress = now
        store(&record)
        return record
    }

    /// The transfer moves to `phase` (an upload checked, handed over; a transfer ending), with
    /// `error`, `result`, and (an upload's, once known) its size and digest.
    public mutating func moved(
        _ id: TransferID, to phase: TransferPhase, error: TransferErrorCode? = nil, result: [UInt8]? = nil,
        size: Int64? = nil, digest: [UInt8]? = nil, now: Date
    ) -> TransferRecord? {
        guard var record = records[id], !record.phase.isEnded else { return nil }
        record.phase = phase
        record.error = error
        if let result { record.result = result }
        if let size { record.size = size }
        if let digest { record.digest = digest }
        if phase.isEnded {
            record.ended = now
            attachedTo[id] = nil
        }
        store(&record)
        return record
    }

    /// A caller cancels its transfer: it ends as canceled (nil when it has no such transfer;
    /// an ended one stays as it ended).
    public mutating func cancel(_ id: TransferID, owner: TransferOwner, now: Date) -> TransferRecord? {
        guard let record = find(id, owner: owner) else { return nil }
        guard !record.phase.isEnded else { return record }
        return moved(id, to: .canceled, now: now)
    }

    // MARK: - What a caller asks about

    /// The caller's transfers changed after change number `since` (all of them without it),
    /// oldest change first, and the cursor to ask with next.
    public func changes(of owner: TransferOwner, since: UInt64?) -> (records: [TransferRecord], cursor: UInt64) {
        let changed = records.values.filter { $0.owner == owner && $0.sequence > (since ?? 0) }
            .sorted { $0.sequence < $1.sequence }
        return (changed, sequence)
    }

    /// The caller forgets its ended transfers among `ids` (an unfinished one stays: cancel it
    /// first); returns those removed, whose files go.
    public mutating func forget(_ ids: [TransferID], owner: TransferOwner) -> [TransferRecord] {
        ids.compactMap { id in
            guard let record = find(id, owner: owner), record.phase.isEnded else { return nil }
            records[id] = nil
            return record
        }
    }

    /// Removes every transfer of `owner` at once (its device was unpaired, its token revoked):
    /// returns them, whose files go and whose attached connections are told.
    public mutating func removeAll(of owner: TransferOwner) -> [TransferRecord] {
        let gone = records.values.filter { $0.owner == owner }
        for record in gone {
            records[record.id] = nil
            attachedTo[record.id] = nil
        }
        return gone
    }

    /// Removes every transfer made by `service` of `package` for `owner` (the caller may no
    /// longer open the service).
    public mutating func removeAll(of owner: TransferOwner, package: String, service: String) -> [TransferRecord] {
        let gone = records.values.filter { $0.owner == owner && $0.package == package && $0.service == service }
        for record in gone {
            records[record.id] = nil
            attachedTo[record.id] = nil
        }
        return gone
    }

    // MARK: - The sweep

    /// What a sweep did.
    public struct Sweep: Sendable, Equatable {
        /// Unfinished transfers with no progress for the expiry: now expired (their partial
        /// bytes go; the record stays for its caller to see).
        public var expired: [TransferRecord] = []
        /// Ended transfers past the retention: removed, with their files.
        public var removed: [TransferRecord] = []
    }

    /// Expires what made no progress for ``TransferLimits/expiry`` and is not attached, and
    /// removes what ended over ``TransferLimits/retention`` ago. At start and every hour.
    public mutating func sweep(now: Date) -> Sweep {
        var sweep = Sweep()
        let expiry = limits.expiry.timeInterval
        let retention = limits.retention.timeInterval
        for record in Array(records.values) {
            if record.phase.isEnded {
                if let ended = record.ended, now.timeIntervalSince(ended) >= retention {
                    records[record.id] = nil
                    sweep.removed.append(record)
                }
            } else if attachedTo[record.id] == nil, now.timeIntervalSince(record.lastProgress) >= expiry,
                record.phase == .waiting || record.phase == .running
            {
                if let expired = moved(record.id, to: .expired, error: .expired, now: now) {
                    sweep.expired.append(expired)
                }
            }
        }
        return sweep
    }

    private mutating func store(_ record: inout TransferRecord) {
        sequence += 1
        record.sequence = sequence
        records[record.id] = record
    }
}

extension Duration {
    /// In seconds, as Foundation counts time.
    var timeInterval: TimeInterval {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
