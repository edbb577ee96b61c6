public import Foundation

/// The host's transfers: who owns each, which connection has it attached, what changed since a
/// caller last asked, and the limits per caller and in all (CONTRACT section 8). Plain state:
/// the host holds it under one lock, journals each record it returns as changed, and acts on
/// what the calls return (tell a displaced connection, delete a transfer's files; what the
/// table let go of by itself is in ``takeRemoved()``).
///
/// Ownership is checked on every call that names a transfer: another caller's transfer is
/// ``TransferErrorCode/notFound``, exactly as one that does not exist. What a caller can make
/// the table do costs in proportion to its own transfers, never to everyone's: the counts the
/// limits compare are kept as the records change, and each caller's ids are kept apart.
public struct TransferTable: Sendable {
    public let limits: TransferLimits
    private var records: [TransferID: TransferRecord] = [:]
    /// Each caller's transfers.
    private var idsByOwner: [TransferOwner: Set<TransferID>] = [:]
    /// Which connection has each transfer attached, and how many each connection has.
    private var attachedTo: [TransferID: UInt64] = [:]
    private var attachedOnConnection: [UInt64: Int] = [:]
    /// What the limits compare, per caller and in all.
    private var countsByOwner: [TransferOwner: Counts] = [:]
    private var total = Counts()
    /// Ended transfers the table let go of by itself (over a caller's kept outcomes), whose files
    /// the host removes.
    private var removed: [TransferRecord] = []
    /// Each caller's last change number: each change of one of its transfers takes the next.
    /// A caller's own count, so that what it sees of its cursor says nothing of other callers.
    private var sequenceByOwner: [TransferOwner: UInt64] = [:]
    /// The highest change number given out to anyone (or the floor the host kept on disk): a
    /// caller's count that begins again (every transfer it had went) begins above it, so that a
    /// cursor it kept from before never hides a later change.
    public private(set) var highWater: UInt64 = 0

    private struct Counts: Sendable {
        var unfinished = 0
        var ended = 0
        var spoolBytes: Int64 = 0
        var attached = 0

        mutating func add(_ record: TransferRecord, _ sign: Int) {
            if record.phase.isEnded { ended += sign } else { unfinished += sign }
            spoolBytes += Int64(sign) * record.spoolBytes
        }
    }

    /// The table of `records` (the journal's, at start). A record that cannot be one the host
    /// wrote (a size, an offset or a change number out of range, an id twice) is left out, and
    /// named in ``rejected``: the journal is on disk, and whoever could write there is not
    /// trusted to make the host trap.
    public init(limits: TransferLimits, records: [TransferRecord] = [], sequenceFloor: UInt64 = 0) {
        self.limits = limits
        highWater = min(sequenceFloor, UInt64.max / 4)
        for var record in records {
            if let problem = Self.problem(of: record) {
                rejected.append((record.id, problem))
                continue
            }
            guard self.records[record.id] == nil else {
                rejected.append((record.id, "a second record of the same transfer"))
                continue
            }
            // Nothing is attached after a restart: a running transfer waits for its client.
            if record.phase == .running { record.phase = .waiting }
            put(record)
            sequenceByOwner[record.owner] = max(sequenceByOwner[record.owner] ?? 0, record.sequence)
            highWater = max(highWater, record.sequence)
        }
    }

    /// The records ``init(limits:records:)`` left out, and why.
    public private(set) var rejected: [(id: TransferID, problem: String)] = []

    /// Why `record` cannot be one the host keeps, or nil.
    static func problem(of record: TransferRecord) -> String? {
        // Far below Int64.max: sums of sizes across transfers cannot overflow.
        let maxBytes: Int64 = 1 << 56
        if record.size < -1 || record.size > maxBytes { return "its size \(record.size) is out of range" }
        if record.maxSize < -1 || record.maxSize > maxBytes { return "its maximum \(record.maxSize) is out of range" }
        if record.offset < 0 || record.offset > (record.size >= 0 ? record.size : maxBytes) {
            return "its offset \(record.offset) is out of range"
        }
        if record.sequence >= UInt64.max / 2 { return "its change number \(record.sequence) is out of range" }
        if let digest = record.digest, digest.count != 32 { return "its digest is not 32 bytes" }
        if let digest = record.clientDigest, digest.count != 32 { return "its client's digest is not 32 bytes" }
        if record.direction == .download, record.size < 0 { return "a download of no size" }
        if let links = record.links, links.count > maxLinks || links.contains(where: { $0.digest.count != 32 }) {
            return "its links are not ones the host makes"
        }
        if let source = record.source, record.direction != .download || source.size != record.size {
            return "its file does not match its direction or size"
        }
        return nil
    }

    public var count: Int { records.count }

    /// A caller's transfer, or nil when it has none of that id.
    public func find(_ id: TransferID, owner: TransferOwner) -> TransferRecord? {
        guard let record = records[id], record.owner == owner else { return nil }
        return record
    }

    /// Transfer `id`, whoever's it is (for the host's own use: a caller's request goes through
    /// ``find(_:owner:)``).
    public func record(_ id: TransferID) -> TransferRecord? { records[id] }

    /// Every caller that has transfers.
    public var owners: [TransferOwner] { Array(idsByOwner.keys) }

    /// Every transfer (for a sweep's files, or shutdown).
    public var all: [TransferRecord] { Array(records.values) }

    /// The ended transfers the table let go of by itself since the last call (a caller over its
    /// kept outcomes): their records and files are to be removed.
    public mutating func takeRemoved() -> [TransferRecord] {
        defer { removed = [] }
        return removed
    }

    // MARK: - Making a transfer

    /// Why a transfer may not be made.
    public enum Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        case tooManyOfCaller(Int)
        case tooMany(Int)
        case spoolOfCaller(Int64)
        case spool(Int64)
        /// Not a transfer the host could keep (a size out of range, an id taken).
        case invalid(String)

        public var description: String {
            switch self {
            case .invalid(let problem): "not a transfer the host keeps: \(problem)"
            case .tooManyOfCaller(let limit): "the caller has \(limit) unfinished transfers, its limit"
            case .tooMany(let limit): "the host has \(limit) unfinished transfers, its limit"
            case .spoolOfCaller(let limit): "the caller's unfinished uploads would hold over \(limit) bytes, its limit"
            case .spool(let limit): "unfinished uploads would hold over \(limit) bytes on the host, its limit"
            }
        }
    }

    /// Adds `record` (a service offered a file or accepted one), within the limits.
    public mutating func add(_ record: TransferRecord) -> Result<TransferRecord, Refusal> {
        guard records[record.id] == nil, Self.problem(of: record) == nil else {
            return .failure(.invalid(Self.problem(of: record) ?? "a transfer of this id exists"))
        }
        let ofCaller = countsByOwner[record.owner] ?? Counts()
        guard total.unfinished < limits.unfinished else { return .failure(.tooMany(limits.unfinished)) }
        guard ofCaller.unfinished < limits.unfinishedPerCaller else {
            return .failure(.tooManyOfCaller(limits.unfinishedPerCaller))
        }
        // An upload of known size reserves it all; one of unknown size counts as it grows.
        // Compared as what is left, not as sums, so that no size can overflow them.
        let adds = record.spoolBytes
        guard adds <= limits.spoolBytesPerCaller - ofCaller.spoolBytes else {
            return .failure(.spoolOfCaller(limits.spoolBytesPerCaller))
        }
        guard adds <= limits.spoolBytes - total.spoolBytes else { return .failure(.spool(limits.spoolBytes)) }
        var record = record
        store(&record)
        return .success(record)
    }

    /// Whether an upload of unknown size may grow to `offset` bytes within the spool limits.
    public func mayGrow(_ id: TransferID, to offset: Int64) -> Bool {
        guard let record = records[id], offset >= 0, offset <= 1 << 56 else { return false }
        let growth = max(offset - record.spoolBytes, 0)
        let ofCaller = countsByOwner[record.owner]?.spoolBytes ?? 0
        return growth <= limits.spoolBytesPerCaller - ofCaller && growth <= limits.spoolBytes - total.spoolBytes
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
            guard attachedOnConnection[connection, default: 0] < limits.attachedPerConnection else {
                return .failure(.tooManyOnConnection(limits.attachedPerConnection))
            }
            // Moving the caller's own attachment is not one more.
            if previous == nil, countsByOwner[owner, default: Counts()].attached >= limits.attachedPerCaller {
                return .failure(.tooManyOfCaller(limits.attachedPerCaller))
            }
        }
        setAttachment(id, connection)
        if record.phase == .waiting {
            // Attaching is not progress: only bytes moving put the expiry off.
            record.phase = .running
            record.error = nil
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
        setAttachment(id, nil)
        guard record.phase == .running else { return record }
        record.phase = .waiting
        record.error = error
        store(&record)
        return record
    }

    /// Detaches every transfer of `connection` (it closed); returns those it had.
    public mutating func connectionClosed(_ connection: UInt64) -> [TransferRecord] {
        guard attachedOnConnection[connection] != nil else { return [] }
        let ids = attachedTo.filter { $0.value == connection }.map(\.key)
        return ids.compactMap { detach($0, from: connection) }
    }

    // MARK: - Progress and outcomes

    /// Bytes moved: an upload's bytes on stable storage, or a download's acknowledged.
    public mutating func progressed(_ id: TransferID, offset: Int64, now: Date) -> TransferRecord? {
        guard var record = records[id], !record.phase.isEnded, offset >= record.offset,
            offset <= (record.size >= 0 ? record.size : 1 << 56)
        else { return nil }
        record.offset = offset
        record.lastProgress = now
        store(&record)
        return record
    }

    /// The most links a transfer keeps: a new one past them replaces the oldest.
    public static let maxLinks = 4

    /// A new link to transfer `id` of `owner` (nil when the caller has no such transfer, or
    /// it has ended); the links past their time, and the oldest past ``maxLinks``, go.
    public mutating func linked(_ id: TransferID, owner: TransferOwner, _ link: TransferLink, now: Date)
        -> TransferRecord?
    {
        guard var record = find(id, owner: owner), !record.phase.isEnded else { return nil }
        var links = (record.links ?? []).filter { $0.expires > now }
        links.append(link)
        record.links = Array(links.suffix(Self.maxLinks))
        // Not a change of the transfer its caller follows: its change number stays.
        put(record)
        return record
    }

    /// The transfer a link's bearer (its SHA-256) admits at `now`, whoever its caller is.
    public func admitted(_ id: TransferID, bearerDigest: [UInt8], now: Date) -> TransferRecord? {
        guard let record = records[id],
            record.links?.contains(where: { $0.expires > now && $0.digest == bearerDigest }) == true
        else { return nil }
        return record
    }

    /// The transfer moves to `phase` (an upload checked, handed over; a transfer ending), with
    /// `error`, `result`, and (an upload's, once known) its size and digest.
    /// With `from`, only a transfer in one of those phases moves (an upload goes from running to
    /// verifying to delivering once, never back).
    public mutating func moved(
        _ id: TransferID, to phase: TransferPhase, from: Set<TransferPhase>? = nil, error: TransferErrorCode? = nil,
        result: [UInt8]? = nil, size: Int64? = nil, digest: [UInt8]? = nil, clientDigest: [UInt8]? = nil, now: Date
    ) -> TransferRecord? {
        guard var record = records[id], !record.phase.isEnded, from?.contains(record.phase) ?? true else { return nil }
        if let clientDigest { record.clientDigest = clientDigest }
        record.phase = phase
        record.error = error
        if let result { record.result = result }
        if let size { record.size = size }
        if let digest { record.digest = digest }
        if phase.isEnded {
            record.ended = now
            setAttachment(id, nil)
        }
        store(&record)
        if phase.isEnded { keepOutcomes(of: record.owner) }
        return record
    }

    /// A caller cancels its transfer: it ends as canceled (nil when it has no such transfer;
    /// an ended one stays as it ended).
    public mutating func cancel(_ id: TransferID, owner: TransferOwner, now: Date) -> TransferRecord? {
        guard let record = find(id, owner: owner) else { return nil }
        guard !record.phase.isEnded else { return record }
        return moved(id, to: .canceled, now: now)
    }

    /// Past ``TransferLimits/keptOutcomesPerCaller``, a caller's oldest outcomes go (what a
    /// client that makes and finishes transfers without end can make the host keep).
    private mutating func keepOutcomes(of owner: TransferOwner) {
        let excess = (countsByOwner[owner]?.ended ?? 0) - limits.keptOutcomesPerCaller
        guard excess > 0, let ids = idsByOwner[owner] else { return }
        let oldest = ids.compactMap { records[$0] }.filter(\.phase.isEnded)
            .sorted { ($0.ended ?? $0.created, $0.sequence) < ($1.ended ?? $1.created, $1.sequence) }
            .prefix(excess)
        for record in oldest { removed += drop(record.id).map { [$0] } ?? [] }
    }

    // MARK: - What a caller asks about

    /// The caller's transfers changed after change number `since` (all of them without it),
    /// oldest change first, at most `limit` of them, and the cursor to ask with next: the change
    /// number of the last one given (or `since` when none is), so that a caller with more
    /// changes than one answer holds asks again from there. A `since` past the caller's own
    /// count (every transfer it had went, and its count began again) is answered as if it had
    /// none: with everything the caller has now.
    public func changes(of owner: TransferOwner, since: UInt64?, limit: Int = .max)
        -> (records: [TransferRecord], cursor: UInt64)
    {
        let current = sequenceByOwner[owner] ?? 0
        let after = since.map { $0 > current ? 0 : $0 } ?? 0
        let changed = (idsByOwner[owner] ?? []).compactMap { records[$0] }.filter { $0.sequence > after }
            .sorted { $0.sequence < $1.sequence }.prefix(max(limit, 0))
        return (Array(changed), changed.last?.sequence ?? after)
    }

    /// The caller forgets its ended transfers among `ids` (an unfinished one stays: cancel it
    /// first); returns those removed, whose files go.
    public mutating func forget(_ ids: [TransferID], owner: TransferOwner) -> [TransferRecord] {
        ids.compactMap { id in
            guard let record = find(id, owner: owner), record.phase.isEnded else { return nil }
            return drop(id)
        }
    }

    /// Removes transfer `id` whatever its phase (the host could not make what it needs: its
    /// spool file); returns it.
    public mutating func remove(_ id: TransferID) -> TransferRecord? { drop(id) }

    /// Removes every transfer of `owner` at once (its device was unpaired, its token revoked):
    /// returns them, whose files go and whose attached connections are told.
    public mutating func removeAll(of owner: TransferOwner) -> [TransferRecord] {
        (idsByOwner[owner] ?? []).compactMap { drop($0) }
    }

    /// Removes every transfer made by `service` of `package` for `owner` (the caller may no
    /// longer open the service).
    public mutating func removeAll(of owner: TransferOwner, package: String, service: String) -> [TransferRecord] {
        let ids = (idsByOwner[owner] ?? []).filter {
            records[$0]?.package == package && records[$0]?.service == service
        }
        return ids.compactMap { drop($0) }
    }

    // MARK: - The sweep

    /// What a sweep did.
    public struct Sweep: Sendable, Equatable {
        /// Unfinished transfers with no progress for the expiry: now expired (their partial
        /// bytes go; the record stays for its caller to see), each with the connection that had
        /// it attached, to be told.
        public var expired: [TransferRecord] = []
        public var expiredAttachments: [TransferID: UInt64] = [:]
        /// Ended transfers past the retention: removed, with their files.
        public var removed: [TransferRecord] = []
    }

    /// Expires what moved no byte for ``TransferLimits/expiry`` (attached or not: a client that
    /// attaches and sends nothing does not keep a reservation for ever; the host tells its
    /// connection), and removes what ended over ``TransferLimits/retention`` ago. At start and
    /// every hour. A transfer the host itself is checking or handing to its service is left to
    /// finish.
    public mutating func sweep(now: Date) -> Sweep {
        var sweep = Sweep()
        let expiry = limits.expiry.timeInterval
        let retention = limits.retention.timeInterval
        for record in Array(records.values) {
            if record.phase.isEnded {
                if let ended = record.ended, now.timeIntervalSince(ended) >= retention, let gone = drop(record.id) {
                    sweep.removed.append(gone)
                }
            } else if now.timeIntervalSince(record.lastProgress) >= expiry,
                record.phase == .waiting || record.phase == .running
            {
                let connection = attachedTo[record.id]
                if let expired = moved(record.id, to: .expired, error: .expired, now: now) {
                    sweep.expired.append(expired)
                    if let connection { sweep.expiredAttachments[record.id] = connection }
                }
            }
        }
        return sweep
    }

    // MARK: - Keeping the counts

    /// Gives `record` the next change number and puts it in the table.
    private mutating func store(_ record: inout TransferRecord) {
        let next = (sequenceByOwner[record.owner] ?? highWater) + 1
        sequenceByOwner[record.owner] = next
        highWater = max(highWater, next)
        record.sequence = next
        put(record)
    }

    /// Puts `record` in the table in place of its earlier version, counting it.
    private mutating func put(_ record: TransferRecord) {
        if let old = records[record.id] {
            countsByOwner[old.owner, default: Counts()].add(old, -1)
            total.add(old, -1)
        }
        records[record.id] = record
        idsByOwner[record.owner, default: []].insert(record.id)
        countsByOwner[record.owner, default: Counts()].add(record, 1)
        total.add(record, 1)
    }

    /// Takes transfer `id` out of the table, with its attachment and counts.
    private mutating func drop(_ id: TransferID) -> TransferRecord? {
        guard records[id] != nil else { return nil }
        // Detached first: the attachment is counted against the record's owner.
        setAttachment(id, nil)
        let record = records.removeValue(forKey: id)!
        countsByOwner[record.owner, default: Counts()].add(record, -1)
        total.add(record, -1)
        idsByOwner[record.owner]?.remove(id)
        if idsByOwner[record.owner]?.isEmpty == true {
            idsByOwner[record.owner] = nil
            countsByOwner[record.owner] = nil
            sequenceByOwner[record.owner] = nil
        }
        return record
    }

    /// Attaches transfer `id` to `connection` (nil: to none), counting it.
    private mutating func setAttachment(_ id: TransferID, _ connection: UInt64?) {
        let owner = records[id]?.owner
        if let previous = attachedTo[id] {
            let left = attachedOnConnection[previous, default: 1] - 1
            attachedOnConnection[previous] = left > 0 ? left : nil
            if let owner { countsByOwner[owner, default: Counts()].attached -= 1 }
        }
        attachedTo[id] = connection
        if let connection {
            attachedOnConnection[connection, default: 0] += 1
            if let owner { countsByOwner[owner, default: Counts()].attached += 1 }
        }
    }
}

extension Duration {
    /// In seconds, as Foundation counts time.
    var timeInterval: TimeInterval {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
