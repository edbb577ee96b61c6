/// The limits of transfers (atriumd's `--transfer-*` options), each bounding what one
/// connection or one caller can make the host hold, or all of them together.
public struct TransferLimits: Sendable, Equatable {
    /// The most bytes of one `chunk`'s `data` (what `attached.chunkBytes` tells the client).
    public var chunkBytes: Int
    /// The window a download gets when its `attach` names none, and the most bytes the host
    /// has sent and not had acknowledged on one download, whatever window the client grants.
    public var windowBytes: Int64
    /// The most bytes unacknowledged across one connection's transfers, both ways.
    public var connectionWindowBytes: Int64
    /// The most transfers one connection, and one caller across its connections, has attached.
    public var attachedPerConnection: Int
    public var attachedPerCaller: Int
    /// The most unfinished transfers of one caller, and of all callers together.
    public var unfinishedPerCaller: Int
    public var unfinished: Int
    /// The most bytes unfinished uploads hold or reserve in the spool, per caller and in all.
    public var spoolBytesPerCaller: Int64
    public var spoolBytes: Int64
    /// The free space an upload must leave on the spool's file system.
    public var freeSpaceFloorBytes: Int64
    /// An unfinished transfer with no progress for this long expires.
    public var expiry: Duration
    /// An ended transfer's outcome is kept at least this long (unless its caller forgets it)...
    public var retention: Duration
    /// ...and unless its caller has more outcomes kept than this: past it, its oldest go.
    public var keptOutcomesPerCaller: Int
    /// How long a `transferLink`'s bearer admits its client over HTTPS.
    public var linkLifetime: Duration
    /// The most connections speaking HTTP (to transfers' links) at once.
    public var httpConnections: Int
    /// How long an HTTP connection may wait for a request head, or for its client to read
    /// what it sends, before it is closed.
    public var httpTimeout: Duration

    public init(
        chunkBytes: Int = 256 << 10, windowBytes: Int64 = 4 << 20, connectionWindowBytes: Int64 = 16 << 20,
        attachedPerConnection: Int = 16, attachedPerCaller: Int = 64, unfinishedPerCaller: Int = 256,
        unfinished: Int = 4096, spoolBytesPerCaller: Int64 = 64 << 30, spoolBytes: Int64 = 256 << 30,
        freeSpaceFloorBytes: Int64 = 1 << 30, expiry: Duration = .seconds(24 * 3600),
        retention: Duration = .seconds(7 * 24 * 3600), keptOutcomesPerCaller: Int = 10_000,
        linkLifetime: Duration = .seconds(24 * 3600), httpConnections: Int = 64, httpTimeout: Duration = .seconds(30)
    ) {
        self.chunkBytes = chunkBytes
        self.windowBytes = windowBytes
        self.connectionWindowBytes = connectionWindowBytes
        self.attachedPerConnection = attachedPerConnection
        self.attachedPerCaller = attachedPerCaller
        self.unfinishedPerCaller = unfinishedPerCaller
        self.unfinished = unfinished
        self.spoolBytesPerCaller = spoolBytesPerCaller
        self.spoolBytes = spoolBytes
        self.freeSpaceFloorBytes = freeSpaceFloorBytes
        self.expiry = expiry
        self.retention = retention
        self.keptOutcomesPerCaller = keptOutcomesPerCaller
        self.linkLifetime = linkLifetime
        self.httpConnections = httpConnections
        self.httpTimeout = httpTimeout
    }
}
