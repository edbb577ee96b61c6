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
/// | `mallocArenas` | the malloc arenas the host has made (1 unless `MALLOC_ARENA_MAX` says otherwise; see ``MallocArenas``; -1 where it cannot be told) |
/// | `workersInMemory`, `pluginsInMemory` | worker process backends and loaded plugin libraries (in this process) not yet freed: the current ones, and those a reload retired that are still being let go |
/// | `peers` | addresses with connections counted against the per-address limit |
/// | `freeSlots`, `slots` | connection slots free, and in all |
/// | `slotsHolding` | slots that hold anything of a connection (its link, its client's id, storage for its channels and requests): one per open connection, none more |
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
        let held = heldInSlots()
        let packages = registry.packages.map { package -> ValueSet in
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
            "mallocArenas": .int(Int64(atrium_malloc_arena_count())),
            "peers": .int(Int64(counted.peers)),
            "freeSlots": .int(Int64(counted.free)),
            "slots": .int(Int64(slots.count)),
            "slotsHolding": .int(Int64(held.holding)),
            "channels": .int(Int64(held.channels.values.reduce(0, +))),
            "pendingRequests": .int(Int64(held.pending)),
            "outgoingRequests": .int(Int64(held.outgoing)),
            "launchesInFlight": .int(Int64(launcher.inFlight.load(ordering: .relaxed))),
            "packages": .array(ValueArray(maps: packages)),
        ]
    }
}

extension HostCore {
    /// What every connection's slot holds: open channels by package, requests waiting on
    /// services and on clients, and how many slots hold anything at all.
    func heldInSlots() -> (channels: [String: Int], pending: Int, outgoing: Int, holding: Int) {
        var channels: [String: Int] = [:]
        var pending = 0
        var outgoing = 0
        var holding = 0
        for slot in slots {
            slot.book.withLock { book in
                for channel in book.channels.values { channels[channel.backend.package, default: 0] += 1 }
                pending += book.pending.count
                outgoing += book.outgoing.count
                if book.holdsAnything { holding += 1 }
            }
        }
        return (channels, pending, outgoing, holding)
    }

    /// Sets what the metrics read at scrape: what the host holds now (as `host.status` counts
    /// it) and the totals it keeps.
    func updateMetrics(_ metrics: HostMetrics) {
        let counted = state.withLock { state in
            (tcp: state.tcpConnections, local: state.localConnections)
        }
        metrics.gauge("atrium_connections", [("transport", "tcp")], Double(counted.tcp))
        metrics.gauge("atrium_connections", [("transport", "local")], Double(counted.local))
        let held = heldInSlots()
        let current = registry.packages
        for package in current {
            let name = package.manifest.package
            metrics.gauge("atrium_channels", [("package", name)], Double(held.channels[name] ?? 0))
            let state = package.backend?.health.state ?? .failed
            for each in BackendHealth.State.allCases {
                metrics.gauge(
                    "atrium_package_state", [("package", name), ("state", each.rawValue)], each == state ? 1 : 0)
            }
        }
        metrics.forget(packagesOtherThan: Set(current.map(\.manifest.package)))
        metrics.gauge("atrium_pending_requests", [], Double(held.pending))
        metrics.gauge("atrium_launches_in_flight", [], Double(launcher.inFlight.load(ordering: .relaxed)))
        metrics.gauge("atrium_uptime_seconds", [], (ContinuousClock.now - started).seconds)
        metrics.gauge("atrium_heap_in_use_bytes", [], Double(atrium_heap_in_use()))
        metrics.gauge("atrium_build_info", [("version", AtriumVersion.current)], 1)
        metrics.total("atrium_connections_accepted_total", totals.connections.load(ordering: .relaxed))
        metrics.total("atrium_requests_received_total", totals.requests.load(ordering: .relaxed))
        metrics.total("atrium_launches_received_total", totals.launches.load(ordering: .relaxed))
    }
}
