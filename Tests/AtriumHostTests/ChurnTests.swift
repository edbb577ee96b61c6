import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// Phones connect and go all day: whatever a connection made the host hold must be let go
/// when it goes, however it goes. These tests churn a few thousand connections, each leaving
/// something different behind at the moment it goes (nothing, a channel, a request the
/// service never answers, a message the client never answers, a launch under way, a worker's
/// channel, a protocol error), then ask the host itself (`host.status`, what `atrium status`
/// shows) what it still holds. Counted by the host, not read from RSS, which is noisy.
@Suite(.serialized) struct ChurnTests {
    static let workerPackage = "atrium.tests.service.worker"

    static let manifests = Fixtures.all.merging([
        "test-worker.json": """
        { "manifestVersion": 1, "package": "\(workerPackage)", "library": "libAtriumTestService.so",
          "isolation": "process", "services": [{ "name": "test", "supportsRemoteSystems": true }] }
        """
    ]) { $1 }

    /// How each cycle leaves the host, by its number modulo the count.
    enum Cycle: Int, CaseIterable {
        case connectAndClose, helloAndClose, requestAndClose, unansweredRequest, unansweredMessage,
            launchUnderWay, workerUnansweredRequest, protocolError
    }

    /// One connection that does `cycle` and goes; returns whether it got as far as it meant to.
    static func run(_ cycle: Cycle, _ number: Int, port: Int) async throws -> Bool {
        let client = try await TestClient.connect(port: port)
        do {
            let done = try await run(cycle, number, on: client)
            await client.close()
            return done
        } catch {
            await client.close()
            throw error
        }
    }

    static func run(_ cycle: Cycle, _ number: Int, on client: TestClient) async throws -> Bool {
        if cycle == .connectAndClose { return true }
        try await client.hello(clientId: "churn-\(number)")
        switch cycle {
        case .connectAndClose, .helloAndClose:
            return true
        case .requestAndClose:
            guard
                try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage)
                    == .success
            else { return false }
            return try await client.request(channel: 1, id: 1, ["n": .int(Int64(number))]).status == .success
        case .unansweredRequest:
            guard try await client.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success else {
                return false
            }
            // "hang": the service never answers; the request is pending when the client goes.
            try await client.send(
                .request(RequestFrame(channel: 1, id: 1, message: EncodedValueSet(["Action": "hang"]))))
            return true
        case .workerUnansweredRequest:
            guard try await client.open(channel: 1, service: "test", package: workerPackage) == .success else {
                return false
            }
            // Pending when the client goes, and answered after it went (a worker that let
            // requests time out would be restarted as stuck, which is not this test's matter).
            try await client.send(
                .request(
                    RequestFrame(channel: 1, id: 1, message: EncodedValueSet(["Action": "late", "DelayMs": 300]))))
            return true
        case .unansweredMessage:
            guard try await client.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success else {
                return false
            }
            // The service sends the client a message and waits for its answer, which never comes.
            try await client.send(
                .request(RequestFrame(channel: 1, id: 1, message: EncodedValueSet(["Action": "send"]))))
            guard case .request = try await client.next() else { return false }
            return true
        case .launchUnderWay:
            try await client.send(.launch(LaunchFrame(id: 1, uri: "atrium-test:churn-\(number)")))
            return true
        case .protocolError:
            guard try await client.open(channel: 1, service: "test", package: workerPackage) == .success else {
                return false
            }
            try await client.sendRaw(TestClient.frame([0xA1, 0x01, 0x02]))  // a map without a type
            guard case .error = try await client.next() else { return false }
            return true
        }
    }

    /// The host's own counts, asked over its local socket.
    static func status(_ local: TestClient, id: UInt64) async throws -> ValueSet {
        try await local.send(.admin(AdminFrame(id: id, command: "host.status")))
        let frame = try await local.next()
        guard case .adminResult(let result) = frame, result.status == 0, let report = try result.result?.decode() else {
            Issue.record("host.status: \(String(describing: frame))")
            return [:]
        }
        return report
    }

    /// The host's open descriptors, as what each is (a socket or pipe's inode, a file's path).
    static func descriptors(of host: TestHost) -> Set<String> {
        let folder = "/proc/\(host.process.processIdentifier)/fd"
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return Set(
            entries.map {
                "\($0) → " + ((try? FileManager.default.destinationOfSymbolicLink(atPath: "\(folder)/\($0)")) ?? "?")
            })
    }

    /// What the host holds with only the asking connection left, by key.
    static func atRest(slots: Int64) -> [String: Int64] {
        [
            "connections": 1, "tcpConnections": 0, "localConnections": 1, "connectionsInMemory": 1, "peers": 0,
            "freeSlots": slots - 1, "slotsHolding": 1, "channels": 0, "pendingRequests": 0, "outgoingRequests": 0,
            "launchesInFlight": 0,
        ]
    }

    /// The log lines of the connections the host logged as connected and not as disconnected
    /// (the host runs at debug level), at most 12 connections: what to look at when a count
    /// does not come back.
    static func stillOpen(in log: String) -> String {
        let lines = log.split(separator: "\n")
        func connection(_ line: Substring) -> Substring? {
            guard let start = line.range(of: "connection=") else { return nil }
            return line[start.upperBound...].prefix { $0.isNumber }
        }
        var open: [Substring] = []
        var closed = Set<Substring>()
        for line in lines {
            guard let id = connection(line) else { continue }
            if line.hasSuffix(" connected") || line.contains("] connected") { open.append(id) }
            if line.contains("disconnected") { closed.insert(id) }
        }
        let left = Set(open.filter { !closed.contains($0) }.prefix(12))
        guard !left.isEmpty else { return "none: every connection logged its end" }
        return lines.filter { connection($0).map(left.contains) ?? false }.suffix(80).joined(separator: "\n")
    }

    static func counts(_ report: ValueSet) -> [String: Int64] {
        atRest(slots: 0).keys.reduce(into: [:]) { counts, key in counts[key] = report[key]?.int ?? -1 }
    }

    @Test func everythingAConnectionHeldIsLetGoWhenItGoes() async throws {
        // Every client comes from 127.0.0.1: the limit per address is not what is tested here.
        // A client's close reaches the host as the end of its input, which may be a half-close
        // (CONTRACT: the host still answers what it owes): a request the service never answers
        // keeps its connection until the response timeout, 5 s here (long enough for every
        // other answer on a loaded machine, short enough for the counts to settle soon).
        let host = try await startHost(
            arguments: ["--max-connections-per-peer", "1000", "--response-timeout", "5", "--log-level", "debug"],
            manifests: Self.manifests)
        let local = try await TestClient.connect(unixSocket: host.socketPath)
        try await local.hello()
        // A warm-up round of every kind first: what the host makes once, on first use (a
        // timer's descriptor, a thread pool), is not what this test is after.
        for cycle in Cycle.allCases { _ = try await Self.run(cycle, 0, port: host.port) }
        // Until its connections have all gone (one waits for the 5 s response timeout).
        var before = try await Self.status(local, id: 100)
        let slots = before["slots"]?.int ?? 0
        var warming: UInt64 = 100
        _ = try await eventually(within: .seconds(60), every: .milliseconds(100)) {
            warming += 1
            before = try await Self.status(local, id: warming)
            return Self.counts(before) == Self.atRest(slots: slots)
        }
        #expect(Self.counts(before) == Self.atRest(slots: slots))
        let descriptorsBefore = Self.descriptors(of: host)

        // Up to 2,000 cycles, 8 at a time (every kind 250 times), for 90 s; on a machine so
        // loaded that 90 s is not enough (the suite under AddressSanitizer, every suite at
        // once on 2 cores), on until every kind has got as far as it meant to 50 times, for at
        // most 300 s.
        let start = ContinuousClock.now
        var ran = [Cycle: Int]()
        var completed = [Cycle: Int]()
        var number = 0
        func goesOn() -> Bool {
            let spent = ContinuousClock.now - start
            let fewest = Cycle.allCases.map { completed[$0, default: 0] }.min() ?? 0
            return number < 2000 && (spent < .seconds(90) || (fewest < 50 && spent < .seconds(300)))
        }
        while goesOn() {
            let batch = number..<(number + 8)
            let done = try await withThrowingTaskGroup(of: (Cycle, Bool).self) { group in
                for index in batch {
                    let cycle = Cycle(rawValue: index % Cycle.allCases.count)!
                    group.addTask { (cycle, try await Self.run(cycle, index, port: host.port)) }
                }
                return try await group.reduce(into: [(Cycle, Bool)]()) { $0.append($1) }
            }
            for (cycle, ok) in done {
                ran[cycle, default: 0] += 1
                if ok { completed[cycle, default: 0] += 1 }
            }
            number += batch.count
        }
        // Every kind of cycle got as far as it meant to at least 50 times.
        for cycle in Cycle.allCases {
            #expect(
                completed[cycle, default: 0] >= 50,
                "\(cycle): \(completed[cycle, default: 0]) of \(ran[cycle, default: 0]) got as far as they meant to")
        }

        // The host lets go as each connection's close reaches it: wait (at most 60 s) for the
        // counts to settle, then compare.
        var after = try await Self.status(local, id: 2)
        var asked: UInt64 = 3
        let settle = ContinuousClock.now + .seconds(60)
        while Self.counts(after) != Self.atRest(slots: slots), ContinuousClock.now < settle {
            try await Task.sleep(for: .milliseconds(100))
            after = try await Self.status(local, id: asked)
            asked += 1
        }
        #expect(Self.counts(after) == Self.atRest(slots: slots), "after \(number) connections")
        if Self.counts(after) != Self.atRest(slots: slots) {
            Issue.record("what the connections still open did: \(Self.stillOpen(in: host.log))")
        }
        let descriptorsAfter = Self.descriptors(of: host)
        // Not one that was not there before (the host may have let go of something of its own).
        #expect(
            descriptorsAfter.subtracting(descriptorsBefore).isEmpty,
            "new: \(descriptorsAfter.subtracting(descriptorsBefore).sorted())")
        // No backend was made or kept: the same worker backend and plugin instances as before.
        for key in ["workersInMemory", "pluginsInMemory"] {
            let counts = [before[key]?.int, after[key]?.int]
            #expect(counts[0] != nil && counts[0] == counts[1], "\(key): \(counts)")
        }
        // The same worker process as at the start: nothing in the churn made it restart.
        let workers = [before, after].map { report in
            report["packages"]?.array?.maps?.first { $0["package"]?.string == Self.workerPackage }
        }
        let states = workers.map { $0?["state"]?.string }
        let pids = workers.map { $0?["pid"]?.int }
        #expect(states == ["ready", "ready"] && pids[0] != nil && pids[0] == pids[1], "\(workers)")
        // Every thread the churn used (the event loops, the launch threads) allocated from the
        // one malloc arena atriumd sets first thing (MallocArenas): a second arena would mean
        // the cap came too late, and the host's memory would creep with its threads. Under
        // AddressSanitizer malloc is the sanitizer's, and the host says it cannot tell.
        let arenas = after["mallocArenas"]?.int
        #expect(arenas == (TestEnvironment.addressSanitizer ? -1 : 1), "\(String(describing: arenas))")

        await local.close()
        #expect(await host.stop() == 0)
        #expect(host.logged("connections left in memory: 0"), "\(host.log.suffix(400))")
    }

    /// What the environment says, and how many arenas the host makes with it: one where glibc
    /// would refuse the setting (the host's own cap stays), more than one where the cap taken
    /// allows them (two event loops serving 16 clients at once contend for the first).
    static let arenaCaps: [([String: String], ClosedRange<Int64>)] = [
        (["MALLOC_ARENA_MAX": "abc"], 1...1), (["MALLOC_ARENA_MAX": "0"], 1...1), (["MALLOC_ARENA_MAX": "-2"], 1...1),
        (["MALLOC_ARENA_MAX": String(repeating: "9", count: 40)], 1...1),
        (["GLIBC_TUNABLES": "glibc.malloc.arena_max=0:glibc.malloc.tcache_count=7"], 1...1),
        (["MALLOC_ARENA_MAX": "3"], 2...3),
        (["GLIBC_TUNABLES": "glibc.malloc.arena_max=2"], 2...2),
    ]

    /// The malloc arena cap the environment sets is taken, and one glibc would refuse is not
    /// (the host's own cap of one stays): each host serves 16 clients at once on both event
    /// loops, which without a cap makes an arena for each thread that finds the others busy.
    @Test(
        .disabled(if: TestEnvironment.addressSanitizer, "under AddressSanitizer malloc has no glibc arenas"),
        arguments: arenaCaps)
    func anArenaCapFromTheEnvironment(_ environment: [String: String], expected: ClosedRange<Int64>) async throws {
        let host = try await TestHost.start(manifests: Fixtures.all, environment: environment)
        let local = try await TestClient.connect(unixSocket: host.socketPath)
        try await local.hello()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for number in 0..<16 {
                group.addTask {
                    let client = try await connectedClient(host, clientId: "arena-\(number)")
                    _ = try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage)
                    for id in 1...100 {
                        _ = try await client.request(channel: 1, id: UInt64(id), ["n": .int(Int64(id))])
                    }
                    await client.close()
                }
            }
            try await group.waitForAll()
        }
        let arenas = try await Self.status(local, id: 1)["mallocArenas"]?.int ?? -1
        #expect(expected.contains(arenas), "\(environment): \(arenas) arenas")
        await local.close()
        #expect(await host.stop() == 0)
    }

    /// Whether the client half-closes after the service's message has reached it, or at once
    /// (the service's message then comes after the half-close).
    @Test(arguments: [true, false])
    func aMessageForAClientThatHalfClosedIsAnsweredAtOnce(afterItArrived: Bool) async throws {
        // The default response timeout (30 s): the answer must not wait for it.
        let host = try await startHost()
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        try await client.send(.request(RequestFrame(channel: 1, id: 1, message: EncodedValueSet(["Action": "send"]))))
        if afterItArrived {
            guard case .request = try await client.next() else {
                Issue.record("the service's message did not arrive")
                return
            }
        }
        // The client can send nothing more, so it can never answer the service's message: the
        // service hears RemoteSystemUnavailable now, answers the client's request with it,
        // and the host then closes the connection.
        try await client.closeOutput()
        var frame = try await client.next(timeout: .seconds(5))
        if !afterItArrived, case .request = frame { frame = try await client.next(timeout: .seconds(5)) }
        guard case .response(let answer) = frame else {
            Issue.record("expected the response, got \(String(describing: frame))")
            return
        }
        let said = try answer.decoded["ClientStatus"]?.int
        #expect(answer.status == .remoteSystemUnavailable && said == 4)
        #expect(try await client.isClosedByHost(timeout: .seconds(5)))
        #expect(await host.stop() == 0)
    }

    @Test func statusNamesEachPackagesState() async throws {
        let host = try await startHost(manifests: Self.manifests)
        let local = try await TestClient.connect(unixSocket: host.socketPath)
        try await local.hello()
        let report = try await Self.status(local, id: 1)
        let packages = report["packages"]?.array?.maps ?? []
        let byName = Dictionary(packages.map { ($0["package"]?.string ?? "", $0) }) { first, _ in first }
        #expect(byName[Fixtures.echoPackage]?["state"]?.string == "ready")
        #expect(byName[Fixtures.echoPackage]?["isolation"]?.string == "none")
        #expect(byName[Self.workerPackage]?["isolation"]?.string == "process")
        let missing = byName["atrium.tests.missing"]
        #expect(missing?["state"]?.string == "failed")
        let reason = missing?["reason"]?.string ?? ""
        #expect(reason.contains("libDoesNotExist.so"), "\(reason)")
        // Only on the local socket: over TCP an admin command is refused.
        let remote = try await connectedClient(host)
        try await remote.send(.admin(AdminFrame(id: 1, command: "host.status")))
        let refused = try await remote.next()
        guard case .adminResult(let answer) = refused else {
            Issue.record("expected adminResult, got \(String(describing: refused))")
            return
        }
        #expect(answer.status == 1 && answer.result == nil)
        await remote.close()
        await local.close()
        #expect(await host.stop() == 0)
    }
}
