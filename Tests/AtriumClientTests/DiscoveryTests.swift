import AtriumClient
import AtriumProtocol
import AtriumTesting
import Foundation
import Testing

/// DNS-SD between two machines: a host namespace and a client namespace joined by a veth pair
/// (``NetworkNamespaceTests/Network``), each with a system bus of its own (dbus-daemon on a
/// socket of the test's, named by DBUS_SYSTEM_BUS_ADDRESS) and an avahi-daemon of its own (in a
/// private mount namespace, so that each has its own /run/avahi-daemon). Both daemons run
/// detached from the test (their PIDs kept): avahi-daemon closes every descriptor it
/// inherits, which a child of Foundation's `Process` must not do. The host advertises
/// through its avahi-daemon; `atrium discover` in the other namespace finds it through the
/// other. Needs root, iproute2, dbus-daemon and avahi-daemon (.ci/run installs them): the
/// tests are skipped elsewhere, and say why.
@Suite(.serialized)
struct DiscoveryTests {
    static let available: Bool =
        NetworkNamespaceTests.available
        && ["/usr/bin/dbus-daemon", "/usr/sbin/avahi-daemon", "/usr/bin/avahi-publish", "/usr/bin/unshare"].allSatisfy {
            FileManager.default.isExecutableFile(atPath: $0)
        }

    /// Two machines, each with its bus and (once started) its avahi-daemon.
    final class Lab: @unchecked Sendable {
        let network: NetworkNamespaceTests.Network
        let folder: URL
        private var daemons: [String: Int32] = [:]
        private var buses: [Int32] = []

        init() async throws {
            network = try NetworkNamespaceTests.Network()
            folder = TLSTests.temporaryFolder("dnssd")
            try FileManager.default.createDirectory(atPath: "/run/avahi-daemon", withIntermediateDirectories: true)
            for namespace in [network.host, network.client] {
                let side = folder.appendingPathComponent(namespace)
                try FileManager.default.createDirectory(at: side, withIntermediateDirectories: true)
                try """
                <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
                 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
                <busconfig>
                  <type>system</type>
                  <listen>unix:path=\(side.path)/bus</listen>
                  <auth>EXTERNAL</auth>
                  <policy context="default">
                    <allow user="*"/> <allow own="*"/> <allow send_type="method_call"/>
                    <allow send_type="signal"/> <allow send_destination="*"/> <allow receive_type="*"/>
                  </policy>
                </busconfig>
                """.write(to: side.appendingPathComponent("bus.conf"), atomically: true, encoding: .utf8)
                let bus = try await Self.detached(
                    ["/usr/bin/dbus-daemon", "--config-file=\(side.path)/bus.conf", "--nofork", "--nopidfile"],
                    log: "\(side.path)/bus.log")
                buses.append(bus)
                try """
                [server]
                host-name=\(namespace)
                use-ipv4=yes
                use-ipv6=no
                enable-dbus=yes
                [publish]
                publish-workstation=no
                publish-hinfo=no
                """.write(to: side.appendingPathComponent("avahi.conf"), atomically: true, encoding: .utf8)
            }
            for _ in 0..<100
            where ![network.host, network.client].allSatisfy({
                FileManager.default.fileExists(atPath: folder.appendingPathComponent("\($0)/bus").path)
            }) {
                try await Task.sleep(for: .milliseconds(20))
            }
        }

        func bus(_ namespace: String) -> [String: String] {
            ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(folder.appendingPathComponent(namespace).path)/bus"]
        }

        /// Starts (or restarts) the avahi-daemon of `namespace` and waits until it is up.
        func startAvahi(_ namespace: String) async throws {
            let side = folder.appendingPathComponent(namespace).path
            let log = "\(side)/avahi-\(UUID().uuidString.prefix(4)).log"
            let pid = try await Self.detached(
                [
                    "/usr/sbin/ip", "netns", "exec", namespace, "/usr/bin/unshare", "-m", "/bin/sh", "-c",
                    "mount -t tmpfs tmpfs /run/avahi-daemon && exec /usr/sbin/avahi-daemon -f \(side)/avahi.conf --no-chroot --no-drop-root --no-rlimits",
                ], log: log, environment: bus(namespace))
            daemons[namespace] = pid
            var text = ""
            for _ in 0..<400 where !text.contains("Server startup complete") {
                guard Self.isAlive(pid) else { throw NetworkError(description: "avahi-daemon: \(text)") }
                try await Task.sleep(for: .milliseconds(25))
                text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            }
        }

        func stopAvahi(_ namespace: String) async {
            guard let pid = daemons.removeValue(forKey: namespace) else { return }
            kill(pid, SIGTERM)
            for _ in 0..<200 where Self.isAlive(pid) { try? await Task.sleep(for: .milliseconds(25)) }
        }

        /// Starts `command` in a session of its own, with its output in `log` and no descriptor
        /// of the test's (Python's `close_fds`): Foundation's `Process` watches a descriptor
        /// each child inherits, so a daemon started through it that outlives its parent, or
        /// closes what it inherits, would confuse it. Returns the daemon's PID.
        static func detached(_ command: [String], log: String, environment: [String: String] = [:]) async throws
            -> Int32
        {
            let script =
                "import subprocess, sys; log = open(sys.argv[1], 'ab'); "
                + "print(subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=log, stderr=log, "
                + "close_fds=True, start_new_session=True).pid)"
            let result = try await runProgram(
                "/usr/bin/python3", ["-c", script, log] + command, environment: environment)
            guard result.status == 0, let pid = Int32(result.output.trimmingCharacters(in: .whitespacesAndNewlines))
            else {
                throw NetworkError(description: "\(command.joined(separator: " ")): \(result.output)")
            }
            return pid
        }

        /// Whether `pid` runs (a zombie, which no one may reap here, does not).
        static func isAlive(_ pid: Int32) -> Bool {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return false }
            return !stat[stat.index(after: close)...].hasPrefix(" Z")
        }

        /// atriumd in the host namespace, on its veth address, with the manifests of the
        /// client tests and a state folder of `state`'s name (the same name: the same identity).
        func startHost(_ arguments: [String], state: String = "host-state", environment: [String: String]? = nil)
            async throws -> (BackgroundProgram, Int)
        {
            let manifests = folder.appendingPathComponent("manifests")
            try FileManager.default.createDirectory(at: manifests, withIntermediateDirectories: true)
            for (name, json) in ClientTests.manifests {
                try json.write(to: manifests.appendingPathComponent(name), atomically: true, encoding: .utf8)
            }
            let host = try startProgram(
                "/usr/sbin/ip",
                [
                    "netns", "exec", network.host, TestHost.buildFolder.appendingPathComponent("atriumd").path,
                    "--manifests", manifests.path, "--listen", "\(network.hostAddress):0", "--socket", "off",
                    "--state-dir", folder.appendingPathComponent(state).path, "--pairing", "off",
                ] + arguments, environment: environment ?? bus(network.host))
            guard let port = await host.port(on: network.hostAddress) else {
                host.process.terminate()
                throw NetworkError(description: "the host did not start: \(host.output)")
            }
            return (host, port)
        }

        /// `atrium ARGUMENTS` in the client namespace, through its bus.
        func atrium(_ arguments: [String]) async throws -> ProgramOutput {
            try await runProgram(
                "/usr/sbin/ip",
                ["netns", "exec", network.client, TestHost.buildFolder.appendingPathComponent("atrium").path]
                    + arguments,
                environment: bus(network.client).merging(["XDG_STATE_HOME": clientState.path]) { $1 })
        }

        func startAtrium(_ arguments: [String]) throws -> BackgroundProgram {
            try startProgram(
                "/usr/sbin/ip",
                ["netns", "exec", network.client, TestHost.buildFolder.appendingPathComponent("atrium").path]
                    + arguments,
                environment: bus(network.client).merging(["XDG_STATE_HOME": clientState.path]) { $1 })
        }

        var clientState: URL { folder.appendingPathComponent("client-state") }

        func tearDown() {
            for pid in daemons.values { kill(pid, SIGTERM) }
            daemons = [:]
            for bus in buses { kill(bus, SIGKILL) }  // dbus-daemon blocks SIGTERM
            network.tearDown()
        }
    }

    /// The JSON objects `atrium discover --watch --json` printed so far.
    static func events(_ output: String) -> [[String: Any]] {
        output.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    static func waitFor(
        _ program: BackgroundProgram, seconds: Double = 15, _ condition: ([[String: Any]]) -> Bool
    ) async -> Bool {
        for _ in 0..<Int(seconds * 20) {
            if condition(events(program.output)) { return true }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return condition(events(program.output))
    }

    static func system(_ event: [String: Any]) -> [String: Any]? { event["system"] as? [String: Any] }

    @Test func aLoopbackHostIsNotAdvertisedAndWelcomeSaysItsKind() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: ["--kind", "laptop"])
        defer { host.process.terminate() }
        #expect(
            await host.waitForLog("not advertised on the network: the TCP listener is on loopback only"), "\(host.log)")
        let client = try await TestClient.connect(port: host.port)
        let welcome = try await client.hello()
        #expect(welcome.kind == "laptop")
        await client.close()
        let connection = try await AtriumConnection.connect(to: try #require(AtriumEndpoint("127.0.0.1:\(host.port)")))
        #expect(connection.welcome.kind == "laptop")
        let found = try await RemoteSystem.find(hostName: "127.0.0.1", port: host.port)
        #expect(found.kind == "laptop" && found.id == connection.welcome.hostId && found.status == .available)
        #expect(found.endpoints == [connection.endpoint])
        await connection.close()

        // A RemoteSystem is handed straight to AppServiceConnection and RemoteLauncher.
        let service = try await AppServiceConnection(
            appServiceName: ClientTests.roman.1, packageId: ClientTests.roman.0, remoteSystem: found)
        #expect(try await service.openRemote() == .success)
        let answer = try await service.sendMessage(["Type": "ping", "CreationDate": "now", "TargetId": "x"])
        #expect(answer.status == .success, "\(answer)")
        await service.close()
        let launched = try await RemoteLauncher.launchUri("no-such-scheme:x", on: found)
        #expect(launched.status == .protocolUnavailable, "\(launched)")
        // A system with no endpoint that answers: the endpoint's reason, not a hang.
        var gone = found
        gone.endpoints = [try #require(AtriumEndpoint("127.0.0.1:1"))]
        await #expect(throws: AtriumClientError.self) { try await AtriumConnection.connect(to: gone) }
    }

    @Test func aHostAddedByAddressIsTrackedUntilItStopsAnswering() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: ["--kind", "server"])
        let watcher = RemoteSystemWatcher(
            options: .init(probeInterval: .milliseconds(200), stateFolder: TLSTests.temporaryFolder("watcher")))
        let events = watcher.start()
        let system = try await watcher.add(hostName: "127.0.0.1", port: host.port)
        #expect(
            system.status == .available && system.kind == "server" && system.source == .address(system.endpoints[0]))
        #expect(watcher.remoteSystems.map(\.id) == [system.id])
        #expect(await host.stop() == 0)
        let stop = Task {
            try? await Task.sleep(for: .seconds(10))
            watcher.stop()
        }
        var seen: [RemoteSystemEvent] = []
        for await event in events {
            seen.append(event)
            if case .updated(let changed) = event, changed.status == .unavailable { break }
        }
        stop.cancel()
        watcher.stop()
        #expect(seen.contains(.added(system)), "\(seen)")
        #expect(
            seen.contains {
                guard case .updated(let changed) = $0 else { return false }
                return changed.id == system.id && changed.status == .unavailable
            }, "\(seen)")
    }

    @Test func aHostPairedByIdIsHeldToItsIdentityWhateverItAdvertises() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests)
        defer { host.process.terminate() }
        let folder = TLSTests.temporaryFolder("pinned")
        let tls = ClientTLS(identity: try ClientTLS.defaultIdentity(in: folder))
        var system = try await RemoteSystem.find(hostName: "127.0.0.1", port: host.port, tls: tls)
        let real = try #require(system.identity)
        // Another machine announcing the host's id with an identity of its own: not paired, and
        // without a pin it would be connected to as an unpaired host.
        system.identity = String(repeating: "ee", count: 32)
        system.isPaired = false
        let known = KnownHosts(folder: folder)
        try known.remember(String(repeating: "ab", count: 32), forHostId: system.id)
        await #expect(throws: AtriumClientError.self) {
            try await AtriumConnection.connect(to: system, tls: tls)
        }
        // The identity the host really proved at pairing: connected, and proven.
        try known.remember(real, forHostId: system.id)
        let connection = try await AtriumConnection.connect(to: system, tls: tls)
        #expect(connection.hostIdentity == real)
        await connection.close()
        // An endpoint that does not answer is passed over for the next one.
        system.endpoints.insert(try #require(AtriumEndpoint("127.0.0.1:1")), at: 0)
        let again = try await AtriumConnection.connect(to: system, tls: tls)
        #expect(again.endpoint.description == "127.0.0.1:\(host.port)")
        await again.close()
    }

    /// docs/DISCOVERY.md's Swift example, kept compiling (it waits for hosts, so it is not run).
    static func documentationExample() async throws {
        let watcher = RemoteSystemWatcher(filters: [.kinds(["desktop", "laptop"]), .status(.available)])
        for await event in watcher.start() {
            switch event {
            case .added(let system):
                let tls = ClientTLS(identity: try ClientTLS.defaultIdentity())
                let connection = try await AtriumConnection.connect(to: system, tls: tls)
                print(system.displayName, try await connection.ping())
                await connection.close()
            case .updated(let system): print("changed:", system.displayName, system.endpoints, system.status)
            case .removed(let id): print("gone:", id)
            case .discoveryUnavailable(let reason): print("discovery:", reason ?? "working again")
            }
        }
    }

    @Test func badDiscoveryOptionsAreRefusedWithTheReason() async throws {
        let atriumd = TestHost.buildFolder.appendingPathComponent("atriumd").path
        let kind = try await runProgram(atriumd, ["--kind", "toaster", "--check"])
        #expect(kind.status == 64 && kind.output.contains("--kind takes one of desktop, laptop"), "\(kind.output)")
        let name = try await runProgram(atriumd, ["--advertise-name", " ", "--check"])
        #expect(name.status == 64 && name.output.contains("--advertise-name takes a name"), "\(name.output)")
        let mode = try await runProgram(atriumd, ["--advertise", "sometimes", "--check"])
        #expect(mode.status == 64, "\(mode.output)")
        let atrium = TestHost.buildFolder.appendingPathComponent("atrium").path
        let filter = try await runProgram(atrium, ["discover", "--kind", "toaster"])
        #expect(filter.status == 64 && filter.output.contains("--kind takes one of"), "\(filter.output)")
        let delay = try await runProgram(atrium, ["discover", "--removal-delay", "-1"])
        #expect(delay.status == 64, "\(delay.output)")
    }

    @Test(
        .enabled(
            if: available, "needs root, ip netns, dbus-daemon, avahi-daemon and avahi-publish (.ci/run installs them)"))
    func aWatcherSeesAHostAppearChangeAndGo() async throws {
        let lab = try await Lab()
        defer { lab.tearDown() }
        try await lab.startAvahi(lab.network.host)
        try await lab.startAvahi(lab.network.client)
        let watch = try lab.startAtrium(["discover", "--watch", "--json", "--removal-delay", "4"])
        defer { watch.process.terminate() }

        let (first, firstPort) = try await lab.startHost(["--advertise-name", "Lab One", "--kind", "server"])
        let added = await Self.waitFor(watch) { events in
            events.contains { $0["event"] as? String == "added" && Self.system($0)?["name"] as? String == "Lab One" }
        }
        #expect(added, "\(watch.output)\n\(first.output)")
        // The watcher may see the host before the host hears from its avahi-daemon that it is seen.
        #expect(
            await first.says { $0.contains("discoverable on the network as \"Lab One\"") }, "\(first.output)")
        let record = try #require(Self.events(watch.output).compactMap(Self.system).last)
        #expect(record["endpoints"] as? [String] == ["\(lab.network.hostAddress):\(firstPort)"])
        #expect(record["kind"] as? String == "server")
        #expect(record["tls"] as? String == "required" && record["pairing"] as? String == "off", "\(record)")
        let id = try #require(record["id"] as? String)
        // Its reachability is tried: available.
        #expect(
            await Self.waitFor(watch) {
                $0.compactMap(Self.system).contains { $0["status"] as? String == "available" }
            },
            "\(watch.output)")

        // Every atrium command takes the discovered name as HOST.
        let ping = try await lab.atrium(["ping", "lab one", "-c", "1"])
        #expect(ping.status == 0 && ping.output.contains("1 sent, 1 received"), "\(ping.output)")
        let listed = try await lab.atrium(["discover", "--json"])
        #expect(listed.status == 0 && listed.output.contains("\"Lab One\""), "\(listed.output)")

        // Restarted under a new name on a new port, with the same identity and id: updated,
        // never removed.
        first.process.terminate()
        _ = await first.finish()
        let (second, secondPort) = try await lab.startHost(["--advertise-name", "Lab Two"])
        defer { second.process.terminate() }
        let updated = await Self.waitFor(watch) { events in
            events.contains {
                $0["event"] as? String == "updated" && Self.system($0)?["name"] as? String == "Lab Two"
                    && (Self.system($0)?["endpoints"] as? [String]) == ["\(lab.network.hostAddress):\(secondPort)"]
            }
        }
        #expect(updated, "\(watch.output)")
        #expect(Self.system(Self.events(watch.output).last ?? [:])?["id"] as? String == id)
        #expect(!Self.events(watch.output).contains { $0["event"] as? String == "removed" }, "\(watch.output)")

        // Shut down: withdrawn, and removed once the removal delay is over.
        second.process.terminate()
        let stopped = await second.finish()
        #expect(stopped.output.contains("shut down"), "\(stopped.output)")
        let removed = await Self.waitFor(watch, seconds: 10) { events in
            events.contains { $0["event"] as? String == "removed" && $0["id"] as? String == id }
        }
        #expect(removed, "\(watch.output)")
        watch.process.terminate()
    }

    @Test(
        .enabled(
            if: available, "needs root, ip netns, dbus-daemon, avahi-daemon and avahi-publish (.ci/run installs them)"))
    func filtersLeaveOutWhatTheyShould() async throws {
        let lab = try await Lab()
        defer { lab.tearDown() }
        try await lab.startAvahi(lab.network.host)
        try await lab.startAvahi(lab.network.client)
        let (host, port) = try await lab.startHost(["--advertise-name", "Desk", "--kind", "desktop"])
        defer { host.process.terminate() }
        // A phone that is not listening, and a service that is not an Atrium host at all.
        let fakeIdentity = String(repeating: "ab", count: 32)
        let phone = try startProgram(
            "/usr/sbin/ip",
            [
                "netns", "exec", lab.network.host, "/usr/bin/avahi-publish", "-s", "Phone", "_atrium._tcp", "9",
                "txtvers=1", "protovers=1", "id=0b9a4f0e-phone", "kind=handset", "tls=required", "pairing=required",
                "identity=\(fakeIdentity)",
            ], environment: lab.bus(lab.network.host))
        defer { phone.process.terminate() }
        let stranger = try startProgram(
            "/usr/sbin/ip",
            [
                "netns", "exec", lab.network.host, "/usr/bin/avahi-publish", "-s", "Stranger", "_atrium._tcp", "9",
                "x=1",
            ],
            environment: lab.bus(lab.network.host))
        defer { stranger.process.terminate() }
        // The client paired with the desk's identity (as `atrium pair` would remember it).
        let identity = try #require(
            host.output.split(separator: "\n").first { $0.contains("TLS identity ") }.flatMap {
                $0.components(separatedBy: "TLS identity ").last
            })
        try FileManager.default.createDirectory(
            at: lab.clientState.appendingPathComponent("atrium"), withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        try "{\"\(lab.network.hostAddress):\(port)\": \"\(identity)\"}".write(
            to: lab.clientState.appendingPathComponent("atrium/known-hosts.json"), atomically: true, encoding: .utf8)

        func names(_ arguments: [String]) async throws -> [String] {
            let result = try await lab.atrium(["discover", "--json", "--timeout", "3"] + arguments)
            let list = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [[String: Any]]
            return (list ?? []).compactMap { $0["name"] as? String }.sorted()
        }
        // Both Atrium hosts, never the stranger (its record has no id).
        var all = try await names([])
        for _ in 0..<5 where all != ["Desk", "Phone"] { all = try await names([]) }
        #expect(all == ["Desk", "Phone"])
        #expect(try await names(["--kind", "desktop"]) == ["Desk"])
        #expect(try await names(["--kind", "handset", "--kind", "laptop"]) == ["Phone"])
        #expect(try await names(["--available"]) == ["Desk"], "the phone's port 9 takes no connection")
        #expect(try await names(["--paired"]) == ["Desk"])
        #expect(try await names(["--paired", "--kind", "handset"]) == [])
        let table = try await lab.atrium(["discover", "--timeout", "3"])
        #expect(table.output.contains("Desk") && table.output.contains("yes"), "\(table.output)")
        #expect(table.output.contains("unavailable"), "\(table.output)")

        // Records are anyone's: a second one whose id starts as the phone's makes the prefix
        // ambiguous, and HOST is refused with both, not picked by which record came first.
        let twin = try startProgram(
            "/usr/sbin/ip",
            [
                "netns", "exec", lab.network.host, "/usr/bin/avahi-publish", "-s", "Twin", "_atrium._tcp", "9",
                "txtvers=1", "protovers=1", "id=0b9a4f0e-twin", "kind=handset", "tls=required",
                "pairing=required", "identity=\(String(repeating: "cd", count: 32))",
            ], environment: lab.bus(lab.network.host))
        defer { twin.process.terminate() }
        var both = try await names([])
        for _ in 0..<5 where !both.contains("Twin") { both = try await names([]) }
        let ambiguous = try await lab.atrium(["ping", "0b9a4f0e", "-c", "1"])
        #expect(ambiguous.status == 3, "\(ambiguous.output)")
        #expect(
            ambiguous.output.contains("2 hosts answer to \"0b9a4f0e\"") && ambiguous.output.contains("0b9a4f0e-twin")
                && ambiguous.output.contains("0b9a4f0e-phone"), "\(ambiguous.output)")
    }

    @Test(
        .enabled(
            if: available, "needs root, ip netns, dbus-daemon, avahi-daemon and avahi-publish (.ci/run installs them)"))
    func aHostWithoutAvahiServesSaysWhyOnceAndAdvertisesWhenAvahiComes() async throws {
        let lab = try await Lab()
        defer { lab.tearDown() }
        // No avahi-daemon yet on the host's bus.
        let (host, port) = try await lab.startHost(["--advertise-name", "Patient"])
        defer { host.process.terminate() }
        let ping = try await lab.atrium(["ping", "\(lab.network.hostAddress):\(port)", "-c", "1"])
        #expect(ping.status == 0, "\(ping.output)")
        #expect(
            host.output.contains("not discoverable on the network yet: avahi-daemon is not running"), "\(host.output)")

        try await lab.startAvahi(lab.network.client)
        try await lab.startAvahi(lab.network.host)
        #expect(
            await host.says(within: 10) { $0.contains("discoverable on the network as \"Patient\"") }, "\(host.output)")
        // avahi-daemon restarts: the host says so, and advertises again.
        await lab.stopAvahi(lab.network.host)
        try await lab.startAvahi(lab.network.host)
        #expect(
            await host.says(within: 10) {
                $0.components(separatedBy: "discoverable on the network as \"Patient\"").count == 3
            }, "\(host.output)")
        #expect(host.output.contains("no longer discoverable: lost avahi-daemon"), "\(host.output)")
        let found = try await lab.atrium(["discover", "--json"])
        #expect(found.output.contains("\"Patient\""), "\(found.output)")
        #expect(host.output.components(separatedBy: "not discoverable on the network yet").count == 2, "said once")

        // Without a system bus at all: said once, in plain words, and the host serves.
        let (lonely, lonelyPort) = try await lab.startHost(
            ["--advertise-name", "Lonely"], state: "lonely-state",
            environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(lab.folder.path)/no-such-bus"])
        defer { lonely.process.terminate() }
        try await Task.sleep(for: .seconds(6))  // past the first retry
        let served = try await lab.atrium(["ping", "\(lab.network.hostAddress):\(lonelyPort)", "-c", "1"])
        #expect(served.status == 0, "\(served.output)")
        #expect(
            lonely.output.components(separatedBy: "not discoverable on the network: cannot reach avahi-daemon").count
                == 2, "\(lonely.output)")
    }

    @Test(
        .enabled(
            if: available, "needs root, ip netns, dbus-daemon, avahi-daemon and avahi-publish (.ci/run installs them)"))
    func aTakenNameGetsAvahisAlternativeAndOffAdvertisesNothing() async throws {
        let lab = try await Lab()
        defer { lab.tearDown() }
        try await lab.startAvahi(lab.network.host)
        try await lab.startAvahi(lab.network.client)
        let (one, _) = try await lab.startHost(["--advertise-name", "Twin"])
        defer { one.process.terminate() }
        let (two, _) = try await lab.startHost(["--advertise-name", "Twin"], state: "twin-state")
        defer { two.process.terminate() }
        let (hidden, _) = try await lab.startHost(
            ["--advertise-name", "Hidden", "--advertise", "off"], state: "hidden-state")
        defer { hidden.process.terminate() }
        // Two hosts of one machine have one id: one remote system, with both endpoints, under
        // the name advertised last.
        var endpoints: [String] = []
        for _ in 0..<5 where endpoints.count < 2 {
            let result = try await lab.atrium(["discover", "--json", "--timeout", "3"])
            let list = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [[String: Any]]
            #expect(list?.count == 1, "\(result.output)")
            endpoints = list?.first?["endpoints"] as? [String] ?? []
        }
        #expect(endpoints.count == 2, "\(one.output)\n\(two.output)")
        let renamed = [one, two].first { $0.output.contains("the name \"Twin\" is taken") }
        #expect(renamed?.output.contains("advertising as \"Twin #2\" instead") == true)
        #expect(hidden.output.contains("not advertised on the network (--advertise off)"), "\(hidden.output)")
    }
}
