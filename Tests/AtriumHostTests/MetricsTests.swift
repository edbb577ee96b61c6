import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// `--metrics`: what Prometheus scrapes, read by Python's prometheus_client, the parser
/// Prometheus's own Python tooling uses.
@Suite struct MetricsTests {
    /// One sample: a metric's name, its labels and its value.
    struct Sample: Decodable, Equatable {
        var name: String
        var labels: [String: String]
        var value: Double
    }

    /// Reads `/metrics` of the host and parses it with prometheus_client; nil if the parser
    /// refused it (the reason is recorded).
    static func scrape(port: Int) async throws -> [Sample]? {
        let script = """
            import json, sys, urllib.request
            from prometheus_client.parser import text_string_to_metric_families
            text = urllib.request.urlopen("http://127.0.0.1:\(port)/metrics", timeout=10).read().decode()
            samples = []
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    samples.append({"name": sample.name, "labels": sample.labels, "value": sample.value})
            json.dump(samples, sys.stdout)
            """
        let result = try await runProgram("python3", ["-c", script])
        guard result.status == 0, let data = result.output.data(using: .utf8),
            let samples = try? JSONDecoder().decode([Sample].self, from: data)
        else {
            Issue.record("prometheus_client could not read the metrics: \(result.output)")
            return nil
        }
        return samples
    }

    static func value(_ samples: [Sample], _ name: String, _ labels: [String: String] = [:]) -> Double? {
        samples.first { sample in
            sample.name == name && labels.allSatisfy { key, value in sample.labels[key] == value }
        }?.value
    }

    struct NoMetricsAddress: Error, CustomStringConvertible {
        var description: String
    }

    /// A host with `--metrics` on a free port, and that port (from what atriumd says).
    static func startHost(manifests: [String: String] = Fixtures.referenceManifests) async throws -> (TestHost, Int) {
        let host = try await TestHost.start(manifests: manifests, arguments: ["--metrics", "127.0.0.1:0"])
        if await host.waitForLog("metrics on http://127.0.0.1:", timeout: .seconds(5)),
            let line = host.log.split(separator: "\n").first(where: { $0.contains("metrics on http://127.0.0.1:") }),
            let port = Int(line.split(separator: ":").last?.split(separator: "/").first ?? "")
        {
            return (host, port)
        }
        _ = await host.stop()
        throw NoMetricsAddress(description: "atriumd did not say where its metrics are: \(host.lastLines())")
    }

    @Test func whatAPrometheusScrapeReadsIsWhatTheHostDid() async throws {
        let (host, port) = try await Self.startHost()
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        for n in 0..<5 {
            #expect(try await client.request(channel: 1, id: UInt64(n), ["n": .int(Int64(n))]).status == .success)
        }
        // Refused: a package that is not there, and a launch of a scheme nobody declared.
        #expect(try await client.open(channel: 2, service: "s", package: "no.such.package") == .appNotInstalled)
        try await client.send(.launch(LaunchFrame(id: 9, uri: "nosuchscheme:x")))
        let launched = try await client.next()
        guard case .launched(let answer) = launched else {
            Issue.record("expected launched, got \(String(describing: launched))")
            return
        }

        guard let samples = try await Self.scrape(port: port) else { return }
        let echo = ["package": Fixtures.echoPackage, "service": Fixtures.echoService]
        #expect(Self.value(samples, "atrium_requests_total", echo.merging(["status": "Success"]) { $1 }) == 5)
        #expect(Self.value(samples, "atrium_requests_total", echo.merging(["status": "Failure"]) { $1 }) == 0)
        #expect(Self.value(samples, "atrium_request_duration_seconds_count", echo) == 5)
        #expect(Self.value(samples, "atrium_request_duration_seconds_bucket", echo.merging(["le": "+Inf"]) { $1 }) == 5)
        #expect((Self.value(samples, "atrium_request_duration_seconds_sum", echo) ?? 0) > 0)
        #expect(Self.value(samples, "atrium_channels", ["package": Fixtures.echoPackage]) == 1)
        #expect(Self.value(samples, "atrium_connections", ["transport": "tcp"]) == 1)
        #expect(Self.value(samples, "atrium_package_state", ["package": Fixtures.echoPackage, "state": "ready"]) == 1)
        #expect(Self.value(samples, "atrium_package_state", ["package": Fixtures.echoPackage, "state": "failed"]) == 0)
        #expect(
            Self.value(
                samples, "atrium_launches_total",
                ["scheme": "other", "status": "\(answer.status)".prefix { $0 != " " }.description])
                == 1, "\(samples.filter { $0.name.hasPrefix("atrium_launches") })")
        #expect(Self.value(samples, "atrium_refusals_total", ["reason": "open refused"]) == 1)
        #expect(Self.value(samples, "atrium_requests_received_total") == 5)
        #expect(Self.value(samples, "atrium_connections_accepted_total") == 1)
        #expect((Self.value(samples, "atrium_received_bytes_total") ?? 0) > 0)
        #expect((Self.value(samples, "atrium_sent_bytes_total") ?? 0) > 0)
        #expect(Self.value(samples, "atrium_build_info", ["version": AtriumVersion.current]) == 1)
        // No label carries a client's text: the refused package and scheme are not there.
        #expect(
            !samples.contains {
                $0.labels.values.contains("no.such.package") || $0.labels.values.contains("nosuchscheme")
            })

        // Once the client has gone, what it held reads 0; the totals stay.
        await client.close()
        var after: [Sample] = []
        let deadline = ContinuousClock.now + .seconds(5)
        repeat {
            try await Task.sleep(for: .milliseconds(50))
            after = try await Self.scrape(port: port) ?? []
        } while Self.value(after, "atrium_connections", ["transport": "tcp"]) != 0 && ContinuousClock.now < deadline
        #expect(Self.value(after, "atrium_connections", ["transport": "tcp"]) == 0)
        #expect(Self.value(after, "atrium_channels", ["package": Fixtures.echoPackage]) == 0)
        #expect(Self.value(after, "atrium_requests_total", echo.merging(["status": "Success"]) { $1 }) == 5)
        #expect(await host.stop() == 0)
    }

    @Test func aWorkerRestartIsCountedWithTheRequestItCostAndThePackageIsReadyAgain() async throws {
        let (host, port) = try await Self.startHost(
            manifests: Fixtures.referenceManifests.merging(["w.json": WorkerIsolationTests.manifest()]) { $1 })
        let package = WorkerIsolationTests.package
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "c", package: package) == .success)
        try await client.send(.request(RequestFrame(channel: 1, id: 7, message: EncodedValueSet(["Crash": "exit"]))))
        // The request's answer (AppUnavailable) and the channel's close, in either order.
        var frames: [String] = []
        for _ in 0..<2 {
            switch try await client.next() {
            case .response(let answer): frames.append("response \(answer.status)")
            case .closed(let closed): frames.append("closed \(closed.channel)")
            case let other: frames.append("\(String(describing: other))")
            }
        }
        #expect(frames.sorted() == ["closed 1", "response \(AppServiceResponseStatus.appUnavailable)"])
        #expect(try await WorkerIsolationTests.openWhenBack(client, channel: 2))
        guard let samples = try await Self.scrape(port: port) else { return }
        #expect(Self.value(samples, "atrium_plugin_restarts_total", ["package": package]) == 1)
        #expect(
            Self.value(
                samples, "atrium_requests_total", ["package": package, "service": "c", "status": "AppUnavailable"]) == 1
        )
        #expect(Self.value(samples, "atrium_package_state", ["package": package, "state": "ready"]) == 1)
        #expect(Self.value(samples, "atrium_channels", ["package": package]) == 1)
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func theEndpointAnswersOnlyAScrapeAndHoldsLittleForStrangers() async throws {
        let (host, port) = try await Self.startHost()
        let script = """
            import http.client, select, socket, sys, time
            def ask(method, path, body=None):
                connection = http.client.HTTPConnection("127.0.0.1", \(port), timeout=10)
                connection.request(method, path, body=body)
                response = connection.getresponse()
                response.read()
                return response.status
            print(ask("GET", "/"), ask("POST", "/metrics", b"x"), ask("GET", "/metrics?x=1"), ask("HEAD", "/metrics"))
            print(ask("POST", "/metrics", b"x" * 10000))
            # A stranger that opens connections and sends nothing: past 16 the host closes them.
            # Counted as the host closes them, for at most 4 s (before the 5 s in which a head
            # must come, after which the host would close them all).
            held = [socket.create_connection(("127.0.0.1", \(port))) for _ in range(40)]
            start = time.time()
            gone = set()
            while len(gone) < 24 and time.time() - start < 4:
                readable, _, _ = select.select([s for s in held if s not in gone], [], [], 0.1)
                for s in readable:
                    try:
                        if s.recv(1) == b"":
                            gone.add(s)
                    except ConnectionResetError:
                        gone.add(s)
            print(len(gone))
            # The strangers leave: each half-closes and waits for the host to close its side.
            # The host counts a connection out only after closing it, a moment later, so a
            # scrape at once may still find the endpoint full; it is asked again for at most
            # 5 s (a scraper asks again at its next interval).
            for s in held:
                try:
                    s.shutdown(socket.SHUT_WR)
                    s.settimeout(10)
                    while s.recv(4096):
                        pass
                except OSError:
                    pass
                s.close()
            deadline = time.time() + 5
            while True:
                try:
                    status = ask("GET", "/metrics")
                    break
                except (ConnectionError, http.client.RemoteDisconnected) as error:
                    if time.time() > deadline:
                        status = repr(error)
                        break
                    time.sleep(0.05)
            print(status)
            """
        let result = try await runProgram("python3", ["-c", script])
        let lines = result.output.split(separator: "\n").map(String.init)
        #expect(result.status == 0 && lines.count == 4, "\(result.output)")
        guard lines.count == 4 else { return }
        #expect(lines[0] == "404 405 200 200")
        #expect(lines[1] == "413")
        #expect(Int(lines[2]).map { $0 >= 24 } == true, "connections closed past the limit: \(lines[2])")
        #expect(lines[3] == "200", "a scrape after the strangers left")
        // One that asks again and again without reading the answers is cut off; the host holds
        // nothing for it.
        let flood = """
            import socket, time
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            # A small receive buffer: what the host sends piles up on its side at once.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", \(port)))
            s.setblocking(False)
            request = b"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"
            sent, closed, deadline = 0, False, time.time() + 60
            while time.time() < deadline and not closed:
                try:
                    sent += s.send(request * 100)
                except BlockingIOError:
                    time.sleep(0.05)
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
            print("closed" if closed else "still open", sent // len(request))
            """
        let flooded = try await runProgram("python3", ["-c", flood])
        #expect(flooded.output.hasPrefix("closed"), "\(flooded.output)")
        #expect(host.isRunning)
        #expect(host.isRunning)
        #expect(await host.stop() == 0)
    }

    /// Sixteen half-sent requests from four addresses, kept up by a stranger who reconnects
    /// whatever the host closes, do not keep a scrape out: a new connection takes the place of
    /// the oldest stalled one, one address has at most 4 places, and a head that does not come
    /// within 5 s closes its connection.
    @Test func stalledConnectionsDoNotKeepAScrapeOut() async throws {
        let (host, port) = try await Self.startHost()
        let script = """
            import http.client, select, socket, threading, time
            stop = threading.Event()
            held, lock = [], threading.Lock()
            def stall(address):
                s = socket.socket()
                s.bind((address, 0))
                s.connect(("127.0.0.1", \(port)))
                s.sendall(b"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\n")  # the head is never finished
                return s
            def stranger():
                # Keeps 16 stalled connections, 4 from each of 4 addresses, for at most 8 s.
                addresses = ["127.0.0.%d" % n for n in range(2, 6)]
                deadline = time.time() + 8
                while not stop.is_set() and time.time() < deadline:
                    with lock:
                        for s in list(held):
                            s.setblocking(False)
                            try:
                                if s.recv(1) == b"":
                                    held.remove(s); s.close()
                            except BlockingIOError:
                                pass
                            except OSError:
                                held.remove(s); s.close()
                        while len(held) < 16:
                            held.append(stall(addresses[len(held) % 4]))
                    time.sleep(0.02)
            thread = threading.Thread(target=stranger)
            thread.start()
            time.sleep(1)
            statuses = []
            for _ in range(5):
                try:
                    connection = http.client.HTTPConnection("127.0.0.1", \(port), timeout=5)
                    connection.request("GET", "/metrics")
                    response = connection.getresponse()
                    response.read()
                    statuses.append(str(response.status))
                except Exception as error:
                    statuses.append(type(error).__name__)
                time.sleep(0.2)
            stop.set()
            thread.join()
            print(" ".join(statuses))
            # A fifth connection from one address is closed at once; a head that never comes
            # closes its connection within the head's deadline.
            with lock:
                for s in held: s.close()
            time.sleep(0.5)
            mine = [stall("127.0.0.6") for _ in range(5)]
            began = time.time()
            closed_at = []
            # Each is watched on its own: which of the five the host takes last is its choice.
            waiting = list(mine)
            while waiting and time.time() - began < 10:
                readable, _, _ = select.select(waiting, [], [], 0.05)
                for s in readable:
                    try:
                        s.recv(1)
                    except OSError:
                        pass
                    closed_at.append(time.time() - began)
                    waiting.remove(s)
            print(" ".join("%.1f" % t for t in sorted(closed_at)))
            """
        let result = try await runProgram("python3", ["-c", script])
        let lines = result.output.split(separator: "\n").map(String.init)
        #expect(result.status == 0 && lines.count == 2, "\(result.output)")
        guard lines.count == 2 else { return }
        #expect(lines[0] == "200 200 200 200 200", "scrapes during the stall: \(lines[0])")
        let closedAt = lines[1].split(separator: " ").compactMap { Double($0) }
        #expect(closedAt.count == 5)
        #expect(closedAt.first.map { $0 < 1 } == true, "one of five from one address is closed at once: \(lines[1])")
        #expect(closedAt.dropFirst().allSatisfy { $0 >= 4 && $0 < 9 }, "stalled heads closed at 5 s: \(lines[1])")
        #expect(host.isRunning)
        #expect(await host.stop() == 0)
    }

    @Test func metricsAreOffUnlessAskedForAndABadAddressIsRefused() async throws {
        let host = try await TestHost.start(manifests: Fixtures.referenceManifests)
        #expect(!host.logged("metrics on"))
        #expect(await host.stop() == 0)
        let refused = try await runProgram(
            TestHost.buildFolder.appendingPathComponent("atriumd").path, ["--metrics", "9340", "--check"])
        #expect(refused.status == 64)
        #expect(refused.output.contains("--metrics takes HOST:PORT (for example 127.0.0.1:9340), or 'off'; got '9340'"))
    }
}
