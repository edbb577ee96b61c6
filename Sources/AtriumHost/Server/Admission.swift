/// What one client, or all of them together, may make the host hold: connections, time,
/// buffered bytes, work in flight. Every limit has an `atriumd` flag; a breach is refused
/// with a status or an error frame that says which limit, and logged once per
/// ``breachLogInterval`` with a count (``BreachLog``). docs/SECURITY.md lists them all.
public struct AdmissionLimits: Sendable, Hashable {
    /// The most TCP connections at once. Lowered at start when the process's descriptor
    /// limit could not hold that many.
    public var maxConnections: Int
    /// The most connections on the local socket at once, counted apart from TCP, so that a
    /// flood from the network cannot lock out the host's own user.
    public static let maxLocalConnections = 64
    /// The most TCP connections from one IP address at once (the local socket is exempt).
    public var maxConnectionsPerPeer: Int
    /// How long a new connection has to send `hello`.
    public var helloTimeout: Duration
    /// How long a connection may go without sending a whole frame (while nothing it asked
    /// for is in flight) before the host closes it.
    public var idleTimeout: Duration
    /// The largest first frame (which must be `hello`): what a client that has not said
    /// hello yet can make the host buffer.
    public var maxHelloBytes: Int
    /// Unsent output past which the host stops reading the connection until the client has
    /// read (backpressure), and the mark below which it reads again.
    public var outputHighWaterBytes: Int
    public var outputLowWaterBytes: Int
    /// The most bytes of request messages one connection may have in flight; the excess
    /// requests are answered with status 2 (ResourceLimitsExceeded).
    public var maxInFlightBytes: Int
    /// The most launches in flight, in all and per connection; the excess are answered with
    /// status 7 (DeniedByRemoteSystem) and a reason.
    public var maxLaunches: Int
    public var maxLaunchesPerConnection: Int
    /// The most requests that may wait for one plugin to take them (a plugin that is blocked
    /// or slow); the excess are answered with status 2 at once.
    public var maxQueuedPerService: Int
    /// The most values (scalars, arrays and maps, at every level) one message may hold, so
    /// that the cost of checking a message is bounded whatever its shape.
    public var maxMessageValues: Int
    /// How often each kind of breach is logged at most (with the count since the last line).
    public var breachLogInterval: Duration

    public init(
        maxConnections: Int = 1000,
        maxConnectionsPerPeer: Int = 32,
        helloTimeout: Duration = .seconds(10),
        idleTimeout: Duration = .seconds(300),
        maxHelloBytes: Int = 16 * 1024,
        outputHighWaterBytes: Int = 1 << 20,
        outputLowWaterBytes: Int = 256 * 1024,
        maxInFlightBytes: Int = 16 << 20,
        maxLaunches: Int = 32,
        maxLaunchesPerConnection: Int = 4,
        maxQueuedPerService: Int = 1024,
        maxMessageValues: Int = 65536,
        breachLogInterval: Duration = .seconds(10)
    ) {
        self.maxConnections = maxConnections
        self.maxConnectionsPerPeer = maxConnectionsPerPeer
        self.helloTimeout = helloTimeout
        self.idleTimeout = idleTimeout
        self.maxHelloBytes = maxHelloBytes
        self.outputHighWaterBytes = outputHighWaterBytes
        self.outputLowWaterBytes = outputLowWaterBytes
        self.maxInFlightBytes = maxInFlightBytes
        self.maxLaunches = maxLaunches
        self.maxLaunchesPerConnection = maxLaunchesPerConnection
        self.maxQueuedPerService = maxQueuedPerService
        self.maxMessageValues = maxMessageValues
        self.breachLogInterval = breachLogInterval
    }

    public static let `default` = AdmissionLimits()
}

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension HostConfiguration {
    /// Descriptors kept free for what is not a TCP connection: listeners, local clients
    /// (``AdmissionLimits/maxLocalConnections``), plugin and manifest files, launched
    /// programs' pipes, the log.
    static var descriptorReserve: Int { 128 + AdmissionLimits.maxLocalConnections }

    /// Makes `maxConnections` fit the process's descriptor limit, so that connections are
    /// refused with a reason before `accept` starts failing for everyone: raises the soft
    /// RLIMIT_NOFILE toward the hard one as far as needed, and, when even that is too little,
    /// lowers `maxConnections`. Returns a note for the log when it lowered it.
    mutating func fitToDescriptorLimit() -> String? {
        var limit = rlimit()
        #if canImport(Glibc)
            let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        #else
            let resource = RLIMIT_NOFILE
        #endif
        guard getrlimit(resource, &limit) == 0 else { return nil }
        let wanted = rlim_t(admission.maxConnections + Self.descriptorReserve)
        if limit.rlim_cur < wanted {
            var raised = limit
            raised.rlim_cur = min(wanted, limit.rlim_max)
            if setrlimit(resource, &raised) == 0 { limit = raised }
        }
        let available = Int(clamping: limit.rlim_cur) - Self.descriptorReserve
        guard available < admission.maxConnections else { return nil }
        let asked = admission.maxConnections
        admission.maxConnections = max(available, 1)
        return
            "the descriptor limit (\(limit.rlim_cur), hard \(limit.rlim_max)) holds only \(admission.maxConnections) connections, not the \(asked) of --max-connections: raise it (ulimit -n, LimitNOFILE=) or lower --max-connections"
    }
}
