import ArgumentParser
import AtriumClient
import AtriumDiscovery
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

struct Discover: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the Atrium hosts on the local network (DNS-SD, through avahi-daemon).",
        discussion: """
            Browses for _atrium._tcp for a few seconds, tries each host found with a TCP \
            connection, and lists them. Every atrium command takes a listed NAME where it takes \
            HOST (quote a name with spaces). docs/DISCOVERY.md says what to check when nothing is \
            found.

            Examples:
              atrium discover
              atrium discover --watch --json        # one event per line, as they happen
              atrium discover --kind desktop --kind laptop --available
              atrium ping "Kitchen PC"
            """
    )

    @Option(help: ArgumentHelp("Seconds to look for hosts.", valueName: "seconds"))
    var timeout: Double = 3

    @Flag(help: "Keep watching, and print each host as it is added, updated or removed, until interrupted.")
    var watch = false

    @Flag(name: .customLong("json"), help: "Print JSON: a list of hosts, or with --watch one event per line.")
    var jsonOutput = false

    @Option(
        help: ArgumentHelp(
            "Only hosts of this kind (repeatable): \(MachineKind.all.joined(separator: ", ")).", valueName: "kind"))
    var kind: [String] = []

    @Flag(help: "Only hosts that accept a connection now.")
    var available = false

    @Flag(help: "Only hosts this client paired with.")
    var paired = false

    @Option(
        help: ArgumentHelp(
            "Seconds a host that disappeared may take to come back (restarted, renamed, on a new port) and be reported as updated rather than removed and added.",
            valueName: "seconds"))
    var removalDelay: Double = 1

    func validate() throws {
        guard timeout > 0, timeout <= 3600 else { throw ValidationError("--timeout takes seconds above 0") }
        guard removalDelay >= 0, removalDelay <= 3600 else {
            throw ValidationError("--removal-delay takes seconds, 0 or more")
        }
        for kind in kind where !MachineKind.isValid(kind) {
            throw ValidationError("--kind takes one of \(MachineKind.all.joined(separator: ", ")); got '\(kind)'")
        }
    }

    var filters: [RemoteSystemFilter] {
        var filters: [RemoteSystemFilter] = []
        if !kind.isEmpty { filters.append(.kinds(Set(kind))) }
        if available { filters.append(.status(.available)) }
        if paired { filters.append(.authorization(.paired)) }
        return filters
    }

    func run() async throws {
        let watcher = RemoteSystemWatcher(
            filters: filters, options: .init(removalDelay: .milliseconds(Int64(removalDelay * 1000))))
        let events = watcher.start()
        if watch {
            for await event in events { report(event) }
            watcher.stop()  // and the watcher is kept until here
            return
        }
        let stop = Task {
            try? await Task.sleep(for: .milliseconds(Int64(timeout * 1000)))
            watcher.stop()
        }
        var problem: String?
        for await event in events {
            if case .discoveryUnavailable(let reason) = event { problem = reason }
        }
        stop.cancel()
        let systems = watcher.remoteSystems
        if systems.isEmpty, let problem {
            printError("cannot look for hosts: \(problem). Is avahi-daemon running? (docs/DISCOVERY.md)")
            throw Exit.unreachable
        }
        if jsonOutput {
            print(Self.json(systems.map(Self.object)))
        } else if systems.isEmpty {
            print("No Atrium hosts found on the network in \(timeout) s. docs/DISCOVERY.md says what to check.")
        } else {
            print(Self.table(systems))
        }
    }

    private func report(_ event: RemoteSystemEvent) {
        let (name, object): (String, [String: Any]) =
            switch event {
            case .added(let system): ("added", ["system": Self.object(system)])
            case .updated(let system): ("updated", ["system": Self.object(system)])
            case .removed(let id): ("removed", ["id": id])
            case .discoveryUnavailable(let reason): ("discovery", ["unavailable": reason ?? NSNull()])
            }
        if jsonOutput {
            print(Self.json(object.merging(["event": name]) { first, _ in first }))
        } else {
            switch event {
            case .added(let system), .updated(let system):
                print("\(name): \(Self.line(system))")
            case .removed(let id):
                print("removed: \(id)")
            case .discoveryUnavailable(let reason):
                printError(reason.map { "discovery unavailable: \($0)" } ?? "discovery available again")
            }
        }
        fflush(nil)  // each event at once, also into a pipe
    }

    static func object(_ system: RemoteSystem) -> [String: Any] {
        var object: [String: Any] = [
            "id": system.id, "name": system.displayName, "kind": system.kind,
            "endpoints": system.endpoints.map(\.description), "status": system.status.rawValue,
            "paired": system.isPaired, "tls": system.requiresTLS ? "required" : "optional",
            "pairing": system.requiresPairing ? "required" : "off", "protocolVersion": system.protocolVersion,
        ]
        if let identity = system.identity {
            object["identity"] = identity
            // Paired here, refused there: the host refused this client since it paired.
            if system.isPaired, let refused = KnownHosts().refusedSince(identity) { object["refusedSince"] = refused }
        }
        return object
    }

    static func json(_ value: Any) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys])) ?? Data("null".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    static func line(_ system: RemoteSystem) -> String {
        "\"\(system.displayName)\" \(system.kind) \(system.endpoints.map(\.description).joined(separator: " ")) \(system.status.rawValue)\(system.isPaired ? " paired" : "") id \(system.id)"
    }

    /// What this client knows of its pairing with `system`: "yes", "no", or "here, refused
    /// there" when the host refused it since (it revoked the pairing).
    static func paired(_ system: RemoteSystem) -> String {
        guard system.isPaired else { return "no" }
        guard let identity = system.identity, KnownHosts().refusedSince(identity) != nil else { return "yes" }
        return "here, refused there"
    }

    static func table(_ systems: [RemoteSystem]) -> String {
        let rows =
            [["NAME", "KIND", "ADDRESS", "STATUS", "PAIRED", "ID"]]
            + systems.map {
                [
                    $0.displayName, $0.kind, $0.endpoints.first?.description ?? "-", $0.status.rawValue,
                    paired($0), String($0.id.prefix(8)),
                ]
            }
        let widths = (0..<6).map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { row in
            row.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }
                .joined(separator: "  ").trimmingCharacters(in: .whitespaces)
        }.joined(separator: "\n")
    }
}

/// HOST as the name of a discovered host: the one advertised under that name (any case), or
/// whose id starts with it (8 characters at least), found within `within`.
///
/// Records are anyone's to publish: a host this client paired with (by its id or its identity)
/// is taken at once; otherwise what else answers to the name within a second of the first is
/// looked at too, a host advertised under the name is preferred to one whose id merely starts
/// with it, and two hosts that answer alike are refused as ambiguous (with their ids), not
/// picked by which record came first: `problem` then says so, with `ambiguous` set.
func discoveredHost(named name: String, within: Duration) async -> (
    RemoteSystem?, problem: String?, ambiguous: Bool
) {
    let watcher = RemoteSystemWatcher()
    let events = watcher.start()
    let stop = Task {
        try? await Task.sleep(for: within)
        watcher.stop()
    }
    defer { stop.cancel() }
    let known = KnownHosts()
    // The matches so far, by id, and whether each matched by its advertised name.
    var matches: [String: (system: RemoteSystem, byName: Bool)] = [:]
    var settle: Task<Void, Never>?
    defer { settle?.cancel() }
    for await event in events {
        switch event {
        case .added(let system), .updated(let system):
            let byName = system.displayName.caseInsensitiveCompare(name) == .orderedSame
            guard byName || (name.count >= 8 && system.id.hasPrefix(name.lowercased())) else { continue }
            if system.isPaired || known.identity(ofHostId: system.id) != nil {
                watcher.stop()
                return (system, nil, false)
            }
            matches[system.id] = (system, byName || matches[system.id]?.byName == true)
            if settle == nil {
                settle = Task {
                    try? await Task.sleep(for: .seconds(1))
                    watcher.stop()
                }
            }
        case .discoveryUnavailable(let reason):
            // Without avahi-daemon there is nothing to wait for.
            if let reason {
                watcher.stop()
                return (nil, reason, false)
            }
        case .removed(let id):
            matches[id] = nil
        }
    }
    watcher.stop()  // and the watcher is kept until here
    let byName = matches.values.filter(\.byName)
    let best = byName.isEmpty ? Array(matches.values) : byName
    guard best.count <= 1 else {
        let ids = best.map { "\($0.system.displayName) (id \($0.system.id))" }.sorted().joined(separator: ", ")
        return (
            nil,
            "\(best.count) hosts answer to \"\(name)\": \(ids); name one by its id (8 characters or more), or by its address",
            true
        )
    }
    return (best.first?.system, nil, false)
}

/// Whether HOST names an address to connect to as it is (an IP address, a port, a Unix socket,
/// or a name the resolver knows), rather than a host to find on the network.
func isAddress(_ text: String) -> Bool {
    guard let endpoint = AtriumEndpoint(text) else { return false }
    guard case .tcp(let host, _) = endpoint.address else { return true }
    if text.contains(":") || host == "localhost" { return true }
    var hints = addrinfo()
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    var result: UnsafeMutablePointer<addrinfo>?
    guard getaddrinfo(host, nil, &hints, &result) == 0 else { return false }
    freeaddrinfo(result)
    return true
}
