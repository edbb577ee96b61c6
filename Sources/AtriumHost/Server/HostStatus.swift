import AtriumProtocol
import AtriumValues
import CAtriumSystem
import Foundation

/// What the host holds right now, counted by the host itself: the `host.status` admin command
/// (`atrium status`). Everything a connection holds is here, so that after every other client
/// has gone each count reads 0 but the asking connection's own (one local connection, in
/// memory, with its slot and nothing else); a count that stays above that is something kept
/// too long (the churn test checks exactly that).
///
/// | key | what |
/// |---|---|
/// | `version` | atriumd's version |
/// | `uptimeSeconds` | since the host started |
/// | `listeners` | what it listens on: `tcp 127.0.0.1:7340`, `unix /path` |
/// | `connectionsAccepted`, `requestsReceived`, `launchesReceived` | totals since it started (rates are their differences over time) |
/// | `connections`, `tcpConnections`, `localConnections` | connections admitted and not yet gone |
/// | `connectionsInMemory` | connection handlers not yet freed (a leak shows here first) |
/// | `heapInUseBytes` | what the host's heap holds now (allocated, not merely kept by the allocator as RSS is; -1 where it cannot be told) |
/// | `workersInMemory`, `pluginsInMemory` | worker process backends and loaded plugin libraries (in this process) not yet freed: the current ones, and those a reload retired that are still being let go |
/// | `peers` | addresses with connections counted against the per-address limit |
/// | `freeSlots`, `slots` | connection slots free, and in all |
/// | `channels`, `pendingRequests`, `outgoingRequests` | across every connection's slot |
/// | `launchesInFlight` | launches started and not yet answered |
/// | `packages` | maps of `package`, `isolation`, `state` (ready, starting, restarting, failed), optional `reason`, `pid`, `recentCrashes` |
extension HostCore {
    func statusReport() -> ValueSet {
        let counted = state.withLock { state in
            (
                connections: state.connections.count, tcp: state.tcpConnections, local: state.localConnections,
                peers: state.peers.count, free: state.freeSlots.count
            )
        }
        var channels = 0
        var pending = 0
        var outgoing = 0
        for slot in slots {
            slot.book.withLock { book in
                channels += book.channels.count
                pending += book.pending.count
                outgoing += book.outgoing.count
            }
        }
        let packages = packages.map { package -> ValueSet in
            var entry: ValueSet = [
                "package": .string(package.manifest.package),
                "isolation": .string(package.manifest.isolation == .process ? "process" : "none"),
            ]
            if let backend = package.backend {
                let health = backend.health
                entry["state"] = .string(health.state.rawValue)
                if let reason = health.reason { entry["reason"] = .string(reason) }
                if let pid = health.pid { entry["pid"] = .int(Int64(pid)) }
                if package.manifest.isolation == .process { entry["recentCrashes"] = .int(Int64(health.recentCrashes)) }
            } else {
                entry["state"] = .string(BackendHealth.State.failed.rawValue)
                entry["reason"] = .string(package.loadError ?? "it has no plugin")
            }
            return entry
        }
        return [
            "version": .string(AtriumVersion.current),
            "uptimeSeconds": .double((ContinuousClock.now - started).seconds),
            "listeners": .array(ValueArray(strings: listeners.withLock { $0 })),
            "connectionsAccepted": .int(Int64(truncatingIfNeeded: totals.connections.load(ordering: .relaxed))),
            "requestsReceived": .int(Int64(truncatingIfNeeded: totals.requests.load(ordering: .relaxed))),
            "launchesReceived": .int(Int64(truncatingIfNeeded: totals.launches.load(ordering: .relaxed))),
            "connections": .int(Int64(counted.connections)),
            "tcpConnections": .int(Int64(counted.tcp)),
            "localConnections": .int(Int64(counted.local)),
            "connectionsInMemory": .int(Int64(ConnectionHandler.live.load(ordering: .relaxed))),
            "workersInMemory": .int(Int64(WorkerProcess.live.load(ordering: .relaxed))),
            "pluginsInMemory": .int(Int64(InProcessPlugin.live.load(ordering: .relaxed))),
            "heapInUseBytes": .int(Int64(atrium_heap_in_use())),
            "peers": .int(Int64(counted.peers)),
            "freeSlots": .int(Int64(counted.free)),
            "slots": .int(Int64(slots.count)),
            "channels": .int(Int64(channels)),
            "pendingRequests": .int(Int64(pending)),
            "outgoingRequests": .int(Int64(outgoing)),
            "launchesInFlight": .int(Int64(launchesInFlight.load(ordering: .relaxed))),
            "packages": .array(ValueArray(maps: packages)),
        ]
    }
}
