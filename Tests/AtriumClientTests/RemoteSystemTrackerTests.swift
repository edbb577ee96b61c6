import AtriumDiscovery
import Foundation
import Testing

@testable import AtriumClient

/// The watcher's bookkeeping, fed sightings as Avahi reports them: no daemon needed.
struct RemoteSystemTrackerTests {
    static let identity = String(repeating: "0f", count: 32)

    static func item(_ name: String, ipv6: Bool = false, interface: Int32 = 2) -> DNSSDBrowser.Item {
        DNSSDBrowser.Item(interface: interface, ipv6: ipv6, name: name, domain: "local")
    }

    static func resolution(
        _ address: String = "10.0.0.5", port: Int = 7340, id: String = "host-1", kind: String = "desktop",
        identity: String? = RemoteSystemTrackerTests.identity
    ) -> DNSSDBrowser.Resolution {
        var txt = ["txtvers": "1", "protovers": "1", "id": id, "kind": kind, "tls": "required", "pairing": "required"]
        if let identity { txt["identity"] = identity }
        return DNSSDBrowser.Resolution(hostName: "h.local", address: address, port: port, txt: txt)
    }

    /// A reachability result for the system's endpoints as they are.
    static func probe(_ tracker: inout RemoteSystemTracker, _ id: String, _ reachable: Bool) -> [RemoteSystemEvent] {
        let endpoints = tracker.systems[id]?.endpoints ?? []
        return tracker.probed(id, endpoints: endpoints, reachable: reachable).0
    }

    @Test func aResultForEndpointsThatChangedIsDropped() {
        var tracker = RemoteSystemTracker(filters: [], pairedIdentities: [])
        _ = tracker.resolved(Self.item("Desk"), Self.resolution(port: 1))
        let old = tracker.systems["host-1"]?.endpoints ?? []
        _ = tracker.resolved(Self.item("Desk"), Self.resolution(port: 2))
        #expect(tracker.probed("host-1", endpoints: old, reachable: true).0.isEmpty)
        #expect(tracker.systems["host-1"]?.status == .discoveringAvailability)
    }

    @Test func aHostIsAddedTriedAndUpdatedWithItsStatus() throws {
        var tracker = RemoteSystemTracker(filters: [], pairedIdentities: [])
        let (events, actions) = tracker.resolved(Self.item("Desk"), Self.resolution())
        guard case .added(let system) = try #require(events.first) else {
            Issue.record("expected added, got \(events)")
            return
        }
        #expect(system.id == "host-1" && system.displayName == "Desk" && system.kind == "desktop")
        #expect(system.endpoints == [AtriumEndpoint(.tcp(host: "10.0.0.5", port: 7340))])
        #expect(system.status == .discoveringAvailability && !system.isPaired && system.requiresTLS)
        #expect(actions == [.probe(id: "host-1", endpoints: system.endpoints)])
        let (probed, _) = tracker.probed(
            "host-1", endpoints: tracker.systems["host-1"]?.endpoints ?? [], reachable: true)
        guard case .updated(let available) = try #require(probed.first) else {
            Issue.record("expected updated, got \(probed)")
            return
        }
        #expect(available.status == .available)
        // The same sighting again changes nothing.
        #expect(tracker.resolved(Self.item("Desk"), Self.resolution()).0.isEmpty)
    }

    @Test func aHostOnTwoFamiliesIsOneSystemWithIPv4First() throws {
        var tracker = RemoteSystemTracker(filters: [], pairedIdentities: [])
        _ = tracker.resolved(Self.item("Desk", ipv6: true), Self.resolution("fe80::1%eth0"))
        _ = tracker.resolved(Self.item("Desk", ipv6: true, interface: 3), Self.resolution("2001:db8::5"))
        let (events, _) = tracker.resolved(Self.item("Desk"), Self.resolution("10.0.0.5"))
        guard case .updated(let system) = try #require(events.first) else {
            Issue.record("expected updated, got \(events)")
            return
        }
        #expect(system.endpoints.map(\.description) == ["10.0.0.5:7340", "[2001:db8::5]:7340", "[fe80::1%eth0]:7340"])
        // One family gone: still there, with the other endpoints.
        let (gone, _) = tracker.removed(Self.item("Desk"))
        guard case .updated(let fewer) = try #require(gone.first) else {
            Issue.record("expected updated, got \(gone)")
            return
        }
        #expect(fewer.endpoints.count == 2)
    }

    /// Records that reuse a paired host's id (ids are public), even with its identity copied,
    /// cannot push the address where this client paired with it out of the endpoints tried,
    /// nor behind theirs.
    @Test func recordsReusingAPairedHostsIdDoNotBuryItsAddress() throws {
        var tracker = RemoteSystemTracker(
            filters: [], pairedIdentities: [Self.identity], knownEndpoints: ["10.0.0.5:7340"])
        _ = tracker.resolved(Self.item("Desk"), Self.resolution("10.0.0.5"))
        for n in 1...12 {
            _ = tracker.resolved(Self.item("Desk \(n)"), Self.resolution("10.0.0.\(100 + n)"))
        }
        let endpoints = try #require(tracker.systems["host-1"]?.endpoints)
        #expect(endpoints.first == AtriumEndpoint(.tcp(host: "10.0.0.5", port: 7340)), "\(endpoints)")
        #expect(endpoints.count == RemoteSystemTracker.maxEndpoints)
        // Without a paired address, the cap keeps the newest first few, as before.
        var plain = RemoteSystemTracker(filters: [], pairedIdentities: [])
        _ = plain.resolved(Self.item("Desk"), Self.resolution("10.0.0.5"))
        for n in 1...12 { _ = plain.resolved(Self.item("Desk \(n)"), Self.resolution("10.0.0.\(100 + n)")) }
        #expect(
            plain.systems["host-1"]?.endpoints.contains(AtriumEndpoint(.tcp(host: "10.0.0.5", port: 7340))) == false)
    }

    @Test func aHostThatComesBackWithinTheDelayIsUpdatedNotRemoved() throws {
        var tracker = RemoteSystemTracker(filters: [], pairedIdentities: [])
        _ = tracker.resolved(Self.item("Lab One"), Self.resolution(port: 4000))
        let (none, actions) = tracker.removed(Self.item("Lab One"))
        #expect(none.isEmpty)
        guard case .expireLater(let id, let generation) = try #require(actions.first) else {
            Issue.record("expected a timer, got \(actions)")
            return
        }
        #expect(id == "host-1")
        // Back under a new name and port before the timer fires: one update.
        let (events, _) = tracker.resolved(Self.item("Lab Two"), Self.resolution(port: 4001))
        guard case .updated(let system) = try #require(events.first) else {
            Issue.record("expected updated, got \(events)")
            return
        }
        #expect(system.displayName == "Lab Two" && system.endpoints.first?.description == "10.0.0.5:4001")
        #expect(tracker.expire(id, generation: generation).isEmpty, "the old timer no longer counts")
        // Gone for good: removed when its timer fires.
        let (_, later) = tracker.removed(Self.item("Lab Two"))
        guard case .expireLater(_, let next) = try #require(later.first) else {
            Issue.record("expected a timer, got \(later)")
            return
        }
        #expect(tracker.expire("host-1", generation: next) == [.removed(id: "host-1")])
        #expect(tracker.systems.isEmpty && tracker.matching.isEmpty)
    }

    @Test func filtersDecideWhatIsReportedAsTheSystemChanges() throws {
        var tracker = RemoteSystemTracker(
            filters: [.kinds(["desktop", "laptop"]), .status(.available), .authorization(.paired)],
            pairedIdentities: [Self.identity])
        // Not tried yet: not reported.
        #expect(tracker.resolved(Self.item("Desk"), Self.resolution()).0.isEmpty)
        // Reachable: reported.
        #expect(
            Self.probe(&tracker, "host-1", true).map(
                \.kind) == ["added"])
        // Unreachable now: removed for this watcher.
        #expect(
            Self.probe(&tracker, "host-1", false) == [
                .removed(id: "host-1")
            ])
        #expect(
            Self.probe(&tracker, "host-1", true).map(
                \.kind) == ["added"])
        // Now a server: no longer of a kind asked for.
        #expect(
            tracker.resolved(Self.item("Desk"), Self.resolution(kind: "server")).0 == [.removed(id: "host-1")])
        // A phone and an unpaired laptop never are.
        #expect(tracker.resolved(Self.item("Phone"), Self.resolution(id: "phone", kind: "handset")).0.isEmpty)
        #expect(
            Self.probe(&tracker, "phone", true).isEmpty)
        #expect(
            tracker.resolved(Self.item("Laptop"), Self.resolution(id: "laptop", kind: "laptop", identity: nil)).0
                .isEmpty)
        #expect(
            Self.probe(&tracker, "laptop", true).isEmpty)
        #expect(tracker.matching.isEmpty)
    }

    @Test func recordsThatAreNotAtriumHostsAreLeftOut() {
        var tracker = RemoteSystemTracker(filters: [], pairedIdentities: [])
        let stranger = DNSSDBrowser.Resolution(hostName: "p.local", address: "10.0.0.9", port: 9, txt: ["x": "1"])
        #expect(tracker.resolved(Self.item("Printer"), stranger).0.isEmpty)
        var future = Self.resolution().txt
        future["txtvers"] = "2"
        let newer = DNSSDBrowser.Resolution(hostName: "n.local", address: "10.0.0.8", port: 1, txt: future)
        #expect(tracker.resolved(Self.item("Newer"), newer).0.isEmpty)
        // A sighting that stops being an Atrium record is one no longer.
        _ = tracker.resolved(Self.item("Desk"), Self.resolution())
        #expect(tracker.resolved(Self.item("Desk"), stranger).1.map(\.isTimer) == [true])
    }

    @Test func aNameFromTheNetworkCannotDriveTheTerminal() throws {
        var tracker = RemoteSystemTracker(filters: [], pairedIdentities: [])
        let (events, _) = tracker.resolved(Self.item("Evil\u{1b}[2J\u{202e}txt.exe\n"), Self.resolution())
        guard case .added(let system) = try #require(events.first) else {
            Issue.record("expected added, got \(events)")
            return
        }
        #expect(system.displayName == "Evil\u{FFFD}[2J\u{FFFD}txt.exe\u{FFFD}")
        #expect(RemoteSystemTracker.printable("Küche 🍳") == "Küche 🍳")
    }

    @Test func theHostRecordReadsWhatItWritesAndDefaultsToTheSafeChoice() throws {
        let record = HostRecord(
            hostId: "abc", kind: "laptop", tlsRequired: false, pairingRequired: false, identity: Self.identity)
        #expect(record.txt.first?.key == "txtvers")
        let read = try #require(
            HostRecord(txt: Dictionary(uniqueKeysWithValues: record.txt.map { ($0.key, $0.value) })))
        #expect(read == record)
        let odd = try #require(
            HostRecord(txt: ["ID": "x", "KIND": "toaster", "tls": "maybe", "pairing": "", "identity": "nothex"]))
        #expect(odd.kind == "unknown" && odd.tlsRequired && odd.pairingRequired && odd.identity == nil)
        #expect(HostRecord(txt: ["id": ""]) == nil)
        #expect(HostRecord(txt: ["id": "abc\u{1b}[2J"]) == nil)
        #expect(HostRecord(txt: ["id": String(repeating: "x", count: 65)]) == nil)
    }

    @Test func theMachineKindAndPrettyNameComeFromMachineInfo() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-root-\(UUID().uuidString)")
        try FileManager.default.createDirectory(
            at: root.appendingPathComponent("etc"), withIntermediateDirectories: true)
        try "# set by hostnamectl\nPRETTY_HOSTNAME=\"Kitchen \\\"PC\\\"\"\nCHASSIS=laptop\n".write(
            to: root.appendingPathComponent("etc/machine-info"), atomically: true, encoding: .utf8)
        #expect(MachineKind.detect(root: root.path) == "laptop")
        #expect(MachineKind.prettyHostname(root: root.path) == "Kitchen \"PC\"")
        try "CHASSIS=toaster\n".write(
            to: root.appendingPathComponent("etc/machine-info"), atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(
            at: root.appendingPathComponent("sys/class/dmi/id"), withIntermediateDirectories: true)
        try "10\n".write(
            to: root.appendingPathComponent("sys/class/dmi/id/chassis_type"), atomically: true, encoding: .utf8)
        #expect(MachineKind.detect(root: root.path) == "laptop", "an unknown CHASSIS falls through to the firmware's")
        #expect(MachineKind.prettyHostname(root: root.path) == ProcessInfo.processInfo.hostName)
        #expect(
            DNSSDAdvertiser.Service(name: String(repeating: "é", count: 40), type: "_t._tcp", port: 1, txt: []).name
                .utf8.count == 62)
        #expect(DNSSDAdvertiser.Service(name: "", type: "_t._tcp", port: 1, txt: []).name == "Atrium")
    }
}

extension RemoteSystemEvent {
    var kind: String {
        switch self {
        case .added: "added"
        case .updated: "updated"
        case .removed: "removed"
        case .discoveryUnavailable: "unavailable"
        }
    }
}

extension RemoteSystemTracker.Action {
    var isTimer: Bool {
        if case .expireLater = self { return true }
        return false
    }
}
