import AtriumDiscovery

/// The watcher's bookkeeping, without threads or timers: DNS-SD sightings, reachability
/// results and timer firings go in; the events for the watcher's user, and what to do next
/// (try an endpoint, set a timer), come out. ``RemoteSystemWatcher`` drives it.
struct RemoteSystemTracker {
    /// One DNS-SD sighting: an instance, on one interface and address family.
    struct Sighting: Hashable {
        var item: DNSSDBrowser.Item
        var resolution: DNSSDBrowser.Resolution
        var record: HostRecord
        /// Later sightings win for the name and the record.
        var order: Int
    }

    enum Action: Equatable {
        /// Try the system's endpoints and report with ``probed(_:reachable:)``.
        case probe(id: String, endpoints: [AtriumEndpoint])
        /// Call ``expire(_:generation:)`` after the removal delay.
        case expireLater(id: String, generation: Int)
    }

    let filters: [RemoteSystemFilter]
    private var sightings: [DNSSDBrowser.Item: Sighting] = [:]
    /// Hosts added by address: tracked until the watcher stops.
    private var manual: [String: RemoteSystem] = [:]
    /// Every system known, matching the filters or not.
    private(set) var systems: [String: RemoteSystem] = [:]
    /// Those the user was told of (added, and not removed since).
    private(set) var reported: Set<String> = []
    private var statuses: [String: RemoteSystemStatus] = [:]
    /// Systems with no sighting left, waiting out the removal delay: id → generation.
    private var leaving: [String: Int] = [:]
    private var generation = 0
    private var order = 0
    /// The most endpoints a system keeps.
    static let maxEndpoints = 8
    /// Identities this client paired with.
    var pairedIdentities: Set<String>
    /// The addresses (``KnownHosts`` keys) where this client paired with a host, whose
    /// identity TLS proved there: such an endpoint of a system is tried first and never cut,
    /// so that records that reuse a paired host's id (ids are public) cannot bury its address
    /// under theirs.
    var knownEndpoints: Set<String>

    init(filters: [RemoteSystemFilter], pairedIdentities: Set<String>, knownEndpoints: Set<String> = []) {
        self.filters = filters
        self.pairedIdentities = pairedIdentities
        self.knownEndpoints = knownEndpoints
    }

    /// Systems that match the filters, by name.
    var matching: [RemoteSystem] {
        reported.compactMap { systems[$0] }.sorted { ($0.displayName, $0.id) < ($1.displayName, $1.id) }
    }

    mutating func resolved(
        _ item: DNSSDBrowser.Item, _ resolution: DNSSDBrowser.Resolution
    ) -> ([RemoteSystemEvent], [Action]) {
        guard let record = HostRecord(txt: resolution.txt) else {
            // Not an Atrium host's record (or a layout this client does not know): if the
            // item was one before, it is gone.
            return removed(item)
        }
        let previous = sightings[item]?.record.hostId
        order += 1
        sightings[item] = Sighting(item: item, resolution: resolution, record: record, order: order)
        var events: [RemoteSystemEvent] = []
        var actions: [Action] = []
        if let previous, previous != record.hostId {
            (events, actions) = refresh(previous)
        }
        let (more, moreActions) = refresh(record.hostId)
        return (events + more, actions + moreActions)
    }

    mutating func removed(_ item: DNSSDBrowser.Item) -> ([RemoteSystemEvent], [Action]) {
        guard let gone = sightings.removeValue(forKey: item) else { return ([], []) }
        return refresh(gone.record.hostId)
    }

    mutating func probed(
        _ id: String, endpoints: [AtriumEndpoint], reachable: Bool
    ) -> ([RemoteSystemEvent], [Action]) {
        guard let system = systems[id], system.endpoints == endpoints else { return ([], []) }
        statuses[id] = reachable ? .available : .unavailable
        return refresh(id, probe: false)
    }

    /// The removal delay ran out for `id`: removed now, unless it was seen again meanwhile.
    mutating func expire(_ id: String, generation: Int) -> [RemoteSystemEvent] {
        guard leaving[id] == generation else { return [] }
        leaving[id] = nil
        systems[id] = nil
        statuses[id] = nil
        return reported.remove(id) == nil ? [] : [.removed(id: id)]
    }

    /// A host found by address.
    mutating func add(_ system: RemoteSystem) -> ([RemoteSystemEvent], [Action]) {
        manual[system.id] = system
        statuses[system.id] = system.status
        return refresh(system.id)
    }

    /// Every system, for a periodic reachability check.
    var probes: [Action] {
        systems.values.map { .probe(id: $0.id, endpoints: $0.endpoints) }
    }

    /// Rebuilds `id` from its sightings (and its address, when added by one), and says what
    /// changed for the user.
    private mutating func refresh(_ id: String, probe: Bool = true) -> ([RemoteSystemEvent], [Action]) {
        guard let system = assemble(id) else {
            // Nothing left: it leaves after the removal delay, unless it comes back (a restart,
            // a new name or port) first, which is then an update.
            guard systems[id] != nil, leaving[id] == nil else { return ([], []) }
            generation += 1
            leaving[id] = generation
            return ([], [.expireLater(id: id, generation: generation)])
        }
        leaving[id] = nil
        let before = systems[id]
        systems[id] = system
        var actions: [Action] = []
        if probe, before?.endpoints != system.endpoints {
            actions.append(.probe(id: id, endpoints: system.endpoints))
        }
        let matches = filters.allSatisfy { $0.matches(system) }
        switch (reported.contains(id), matches) {
        case (false, true):
            reported.insert(id)
            return ([.added(system)], actions)
        case (true, false):
            reported.remove(id)
            return ([.removed(id: id)], actions)
        case (true, true) where before != system:
            return ([.updated(system)], actions)
        default:
            return ([], actions)
        }
    }

    private func assemble(_ id: String) -> RemoteSystem? {
        let seen = sightings.values.filter { $0.record.hostId == id }.sorted { $0.order < $1.order }
        guard let latest = seen.last else {
            guard var system = manual[id] else { return nil }
            system.status = statuses[id] ?? system.status
            system.isPaired = system.identity.map { pairedIdentities.contains($0) } ?? false
            return system
        }
        // IPv4 first, then IPv6 (link-local last); each address once.
        var endpoints: [AtriumEndpoint] = []
        let ordered = seen.sorted { rank($0) < rank($1) }
        for sighting in ordered {
            let endpoint = AtriumEndpoint(.tcp(host: sighting.resolution.address, port: sighting.resolution.port))
            if !endpoints.contains(endpoint) { endpoints.append(endpoint) }
        }
        for endpoint in manual[id]?.endpoints ?? [] where !endpoints.contains(endpoint) { endpoints.append(endpoint) }
        // Where this client paired comes first (a stable sort keeps the rest in order).
        let known = endpoints.filter { knownEndpoints.contains(KnownHosts.key($0)) }
        endpoints = known + endpoints.filter { !knownEndpoints.contains(KnownHosts.key($0)) }
        // A peer announcing many addresses under one id gets the first few tried.
        endpoints = Array(endpoints.prefix(max(Self.maxEndpoints, known.count)))
        let record = latest.record
        return RemoteSystem(
            id: id, displayName: Self.printable(latest.item.name), kind: record.kind, endpoints: endpoints,
            status: statuses[id] ?? .discoveringAvailability, identity: record.identity,
            isPaired: record.identity.map { pairedIdentities.contains($0) } ?? false, requiresTLS: record.tlsRequired,
            requiresPairing: record.pairingRequired, protocolVersion: record.protocolVersion,
            source: .dnssd(instanceName: latest.item.name))
    }

    /// A name from the network as it may be shown: anyone on the LAN chooses it, so control
    /// characters (a terminal's escape sequences among them) and bidirectional overrides
    /// become U+FFFD.
    static func printable(_ name: String) -> String {
        String(
            String.UnicodeScalarView(
                name.unicodeScalars.map { scalar in
                    scalar.properties.generalCategory == .control || scalar.properties.isBidiControl
                        ? "\u{FFFD}" : scalar
                }))
    }

    private func rank(_ sighting: Sighting) -> (Int, Int) {
        let address = sighting.resolution.address.lowercased()
        let family = !sighting.item.ipv6 ? 0 : address.hasPrefix("fe80:") ? 2 : 1
        return (family, -sighting.order)
    }
}

/// What a ``RemoteSystemWatcher`` reports, as Rome's watcher events.
public enum RemoteSystemEvent: Sendable, Hashable {
    /// A host that matches the filters was found (or came to match them).
    case added(RemoteSystem)
    /// Something about it changed: its name, endpoints, status or record.
    case updated(RemoteSystem)
    /// It went away (or no longer matches the filters).
    case removed(id: String)
    /// Discovery is not working, with the reason (avahi-daemon is not running, ...); or works
    /// again (nil).
    case discoveryUnavailable(String?)
}

/// What a ``RemoteSystemWatcher`` reports, as Rome's filters: all given must match.
public enum RemoteSystemFilter: Sendable, Hashable {
    /// Only these kinds of machine (``MachineKind``: desktop, laptop, server, ...).
    case kinds(Set<String>)
    /// Only hosts that accepted a connection when last tried (Rome's
    /// `RemoteSystemStatusTypeFilter.Available`), or any.
    case status(RemoteSystemStatusType)
    /// Only hosts this client paired with, or any (Rome's `RemoteSystemAuthorizationKindFilter`).
    case authorization(RemoteSystemAuthorizationKind)

    func matches(_ system: RemoteSystem) -> Bool {
        switch self {
        case .kinds(let kinds): kinds.contains(system.kind)
        case .status(.any): true
        case .status(.available): system.status == .available
        case .authorization(.any): true
        case .authorization(.paired): system.isPaired
        }
    }
}

public enum RemoteSystemStatusType: String, Sendable, Hashable, CaseIterable {
    case any, available
}

public enum RemoteSystemAuthorizationKind: String, Sendable, Hashable, CaseIterable {
    case any, paired
}
