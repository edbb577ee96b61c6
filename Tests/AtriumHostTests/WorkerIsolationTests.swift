import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// Packages with `"isolation": "process"`: the C test service runs in a worker process, and
/// misbehaves on request (segfaults, aborts, exits, spins, leaks). Each test asserts what the
/// package's clients get, that another package keeps answering meanwhile, and that the
/// worker comes back. Waits are bounded in count and time.
@Suite(.serialized) struct WorkerIsolationTests {
    static let package = "atrium.tests.cworker"

    static func manifest(limits: String? = nil, user: String? = nil) -> String {
        """
        { "manifestVersion": 1, "package": "\(package)", "library": "libAtriumTestCService.so",
          "isolation": "process", \(limits.map { "\"limits\": \($0)," } ?? "") \(user.map { "\"user\": \"\($0)\"," } ?? "")
          "services": [{ "name": "c", "supportsRemoteSystems": true },
                       { "name": "status.-3", "supportsRemoteSystems": true },
                       { "name": "sleep.600", "supportsRemoteSystems": true },
                       { "name": "sleep.2000", "supportsRemoteSystems": true },
                       { "name": "sleep.4000", "supportsRemoteSystems": true },
                       { "name": "sleep.8000", "supportsRemoteSystems": true }],
          "schemes": ["atrium-ctest"] }
        """
    }

    static func startWorkerHost(limits: String? = nil, arguments: [String] = []) async throws -> TestHost {
        try await startHost(
            arguments: arguments,
            manifests: Fixtures.referenceManifests.merging(["w.json": manifest(limits: limits)]) { $1 })
    }

    /// A client with an echo channel open (an in-process package), to show it is not disturbed.
    static func bystander(_ host: TestHost) async throws -> TestClient {
        let client = try await connectedClient(host, clientId: "bystander")
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        return client
    }

    static func echoes(_ client: TestClient, _ n: Int) async throws -> Bool {
        let answer = try await client.request(channel: 1, id: UInt64(n), ["n": .int(Int64(n))])
        let decoded = try answer.decoded
        return answer.status == .success && decoded == ["n": .int(Int64(n))]
    }

    /// Opens channel `channel` on the worker's package, retrying while the worker restarts
    /// (at most `seconds`). Until then an open is refused AppUnavailable, or answered Unknown
    /// when the new worker, still loading, did not answer it within the response timeout (a
    /// test that sets it to 0.3 s meets that under AddressSanitizer beside the rest of the
    /// suite).
    static func openWhenBack(_ client: TestClient, channel: UInt64, seconds: Double = 10) async throws -> Bool {
        try await eventually(within: .seconds(seconds), every: .milliseconds(100)) {
            let status = try await client.open(channel: channel, service: "c", package: package)
            #expect(status == .success || status == .appUnavailable || status == .unknown)
            return status == .success
        }
    }

    @Test func aPluginInAWorkerAnswersAsInProcess() async throws {
        let host = try await Self.startWorkerHost()
        #expect(host.logged("worker process started"))
        // With no user of its own, the log says the worker is no boundary against hostile code.
        #expect(host.logged("package \(Self.package) runs in a worker process as atriumd's own user"))
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "c", package: Self.package) == .success)
        let answer = try await client.request(channel: 1, id: 1, ["Int": 41, "Text": "ünï", "Bytes": .bytes([1, 2])])
        #expect(answer.status == .success)
        let decoded = try answer.decoded
        #expect(decoded["IntPlusOne"] == .int(42))
        #expect(decoded["Text"] == "ünï")
        #expect(decoded["Bytes"] == .bytes([1, 2]))
        // Open statuses, launches and the plugin's launches go through the worker too.
        #expect(try await client.open(channel: 2, service: "status.-3", package: Self.package) == .unknown)
        try await client.send(.launch(LaunchFrame(id: 5, uri: "atrium-ctest:status/3")))
        let launched = try await client.next()
        #expect(
            launched
                == .launched(
                    LaunchedFrame(
                        id: 5, status: .protocolUnavailable,
                        error: "package \"\(Self.package)\" answered ProtocolUnavailable (3)")),
            "\(String(describing: launched))")
        let own = try await client.request(channel: 1, id: 2, ["LaunchOwn": "atrium-ctest:hello"])
        #expect(try own.decoded["LaunchStatus"] == .int(Int64(RemoteLaunchUriStatus.deniedByLocalSystem.rawValue)))
        await client.close()
        #expect(await host.stop() == 0)
        #expect(host.logged("exited with status") == false, "the worker was shut down, not lost")
    }

    @Test(arguments: [
        ("segv", "killed by signal 11 (SIGSEGV)"), ("abort", "killed by signal 6 (SIGABRT)"),
        ("exit", "exited with status 3"),
        ("garble", "sent what is not a frame (frameTooLarge: a frame of 4294967295 bytes is over the limit"),
    ])
    func aCrashingWorkerTakesOnlyItsOwnPackage(_ how: String, _ logged: String) async throws {
        let host = try await Self.startWorkerHost(arguments: ["--log-level", "debug"])
        let bystander = try await Self.bystander(host)
        let client = try await connectedClient(host)
        let first = try await client.open(channel: 1, service: "c", package: Self.package)
        #expect(first == .success, "\(host.log)")
        #expect(try await client.open(channel: 2, service: "c", package: Self.package) == .success)
        try await client.send(
            .request(RequestFrame(channel: 1, id: 7, message: EncodedValueSet(["Crash": .string(how)]))))
        // The request in flight is answered AppUnavailable with the reason, and both channels
        // are closed with status Unknown.
        var closed: Set<UInt64> = []
        var answered = false
        for _ in 0..<3 {
            switch try await client.next() {
            case .response(let answer):
                #expect(answer.id == 7 && answer.status == .appUnavailable)
                #expect(answer.error?.contains(logged) == true, "\(answer.error ?? "")")
                answered = true
            case .closed(let frame):
                #expect(frame.status == .unknown)
                closed.insert(frame.channel)
            case let other:
                Issue.record("unexpected \(String(describing: other))")
            }
        }
        #expect(answered)
        #expect(closed == [1, 2])
        #expect(try await Self.echoes(bystander, 1))
        #expect(await host.waitForLog(logged))
        // A worker's first crash says where, as a crash in the host's process does: the file
        // of the plugin's code (AddressSanitizer, where it runs, reports the crash itself).
        if how == "segv" && !TestEnvironment.addressSanitizer {
            #expect(host.logged("Program crashed: Bad pointer dereference"), "\(host.lastLines(60))")
            #expect(host.logged("ctest_request") && host.logged("ctest.c:"), "\(host.lastLines(60))")
        }
        // The worker comes back, and serves again.
        #expect(try await Self.openWhenBack(client, channel: 3))
        let again = try await client.request(channel: 3, id: 8, ["Int": 1])
        #expect(try again.decoded["IntPlusOne"] == .int(2))
        #expect(try await Self.echoes(bystander, 2))
        // What the crashed worker's backend held is given back to the system soon after.
        #expect(await host.waitForLog("a backend was let go: freed memory", timeout: .seconds(10)))
        #expect(host.isRunning)
        await client.close()
        await bystander.close()
        #expect(await host.stop() == 0)
    }

    @Test(
        .disabled(
            if: TestEnvironment.addressSanitizer,
            "AddressSanitizer reserves terabytes of address space, which a memory limit (RLIMIT_AS) cannot allow"))
    func aWorkerOverItsLimitsIsKilledAndRestarted() async throws {
        let host = try await Self.startWorkerHost(limits: #"{"memoryMB": 320, "cpuSeconds": 1}"#)
        let bystander = try await Self.bystander(host)
        let client = try await connectedClient(host)
        let before = try #require(host.residentBytes)
        // A leak ends at the memory limit, a spin at the CPU limit; the host's own memory
        // does not grow with the leak.
        for (index, how) in ["leak", "spin"].enumerated() {
            let channel = UInt64(10 + index)
            #expect(try await Self.openWhenBack(client, channel: channel))
            try await client.send(
                .request(RequestFrame(channel: channel, id: channel, message: EncodedValueSet(["Crash": .string(how)])))
            )
            let answer = try await client.response(timeout: .seconds(20))
            #expect(answer.status == .appUnavailable, "\(how): \(answer)")
            guard case .closed = try await client.next() else {
                Issue.record("\(how): no closed frame")
                continue
            }
            #expect(try await Self.echoes(bystander, index))
        }
        // The leak ends when an allocation fails under the limit (the plugin aborts, or the
        // worker's own runtime traps first, whichever thread asks first); the spin when the
        // kernel sends SIGXCPU.
        #expect(await host.waitForLog("(SIGXCPU)"), "\(host.log)")
        #expect(host.count("worker process (pid") == 2, "\(host.log)")
        #expect(try #require(host.residentBytes) < before + 64 << 20)
        #expect(try await Self.openWhenBack(client, channel: 20))
        await client.close()
        await bystander.close()
        #expect(await host.stop() == 0)
    }

    @Test func aWorkerThatStopsAnsweringIsKilledAndRestarted() async throws {
        // 3 s: every answer but the hung ones comes well within it, also on a loaded machine.
        let host = try await startHost(
            arguments: ["--response-timeout", "3"],
            manifests: Fixtures.referenceManifests.merging(["w.json": Self.manifest()]) { $1 })
        let bystander = try await Self.bystander(host)
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "c", package: Self.package) == .success)
        // The serial plugin blocks in the first; the others wait behind it. Each times out.
        for id in 1...3 {
            try await client.send(
                .request(RequestFrame(channel: 1, id: UInt64(id), message: EncodedValueSet(["SleepMs": 60_000]))))
        }
        for _ in 1...3 {
            #expect(try await client.response().status == .resourceLimitsExceeded)
        }
        // After the third, the worker is taken as hung: killed, its channel closed.
        guard case .closed(let closed) = try await client.next() else {
            Issue.record("the hung worker's channel was not closed")
            return
        }
        #expect(closed.channel == 1 && closed.status == .unknown)
        #expect(await host.waitForLog("stopped answering (3 requests in a row timed out) and was killed"))
        #expect(try await Self.echoes(bystander, 1))
        #expect(try await Self.openWhenBack(client, channel: 2))
        #expect(try await client.request(channel: 2, id: 9, ["Int": 1]).status == .success)
        await client.close()
        await bystander.close()
        #expect(await host.stop() == 0)
    }

    @Test func aWorkerThatForgesFramesIsIgnoredQuietly() async throws {
        let host = try await Self.startWorkerHost()
        let bystander = try await Self.bystander(host)
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "c", package: Self.package) == .success)
        // 20,000 frames a worker may not send: an unknown type, and answers to request 0. The
        // answer comes behind them all: under AddressSanitizer the host takes 2.6 s to read them
        // alone, and more beside the rest of the suite, so it is waited for longer than most.
        let forging = ContinuousClock.now
        try await client.send(.request(RequestFrame(channel: 1, id: 1, message: EncodedValueSet(["Forge": 10_000]))))
        let answer = try await client.response(timeout: .seconds(60))
        #expect(try answer.decoded["Forged"] == .int(10_000))
        #expect(try await Self.echoes(bystander, 1))
        // The package still serves, on the same worker: the forgeries were ignored, not crashes.
        #expect(try await client.request(channel: 1, id: 2, ["Int": 1]).status == .success)
        #expect(host.count("worker process started") == 1)
        // And they are counted, not logged one by one: a line each 10 s at most (the host's
        // interval for such lines) while they came, and one more for the count at the end.
        #expect(await host.waitForLog("sent an unexpected x frame"), "the forgeries did not reach the host")
        let windows = logIntervals(since: forging)
        #expect(host.count("sent an unexpected x frame") <= windows + 1, "\(host.log.suffix(2000))")
        await client.close()
        await bystander.close()
        #expect(await host.stop() == 0)
    }

    @Test func bigAnswersFromAWorkerKeepFlowingWhileTheHostHoldsMoreForIt() async throws {
        // Echo in a worker: twelve requests of 900 kB at once. The host holds more for the
        // worker than its high-water mark, so it stops reading the worker until the worker has
        // read; the worker's answers fill its pipe meanwhile. Neither may wait for the other.
        let echo = """
            { "manifestVersion": 1, "package": "atrium.tests.echo.worker", "library": "libEcho.so",
              "isolation": "process", "services": [{ "name": "atrium.echo", "supportsRemoteSystems": true }] }
            """
        let host = try await startHost(
            arguments: ["--response-timeout", "10"],
            manifests: Fixtures.referenceManifests.merging(["e.json": echo]) { $1 })
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: "atrium.echo", package: "atrium.tests.echo.worker") == .success)
        let blob = EncodedValueSet(["Bytes": .bytes(Array(repeating: 7, count: 900_000))])
        for id in 1...12 {
            try await client.send(.request(RequestFrame(channel: 1, id: UInt64(id), message: blob)))
        }
        // Each is echoed, or refused at once while the host holds too much for the worker
        // (backpressure); none waits for the response timeout, and the worker is never
        // taken for stuck.
        var answered: Set<UInt64> = []
        var echoed = 0
        for _ in 1...12 {
            let response = try await client.response(timeout: .seconds(20))
            let refused =
                response.status == .appUnavailable
                && response.error
                    == "package atrium.tests.echo.worker: its worker process is not reading what it is sent"
            #expect(
                (response.status == .success && response.message == blob) || refused,
                "\(response.status): \(response.error ?? "")")
            if response.status == .success { echoed += 1 }
            answered.insert(response.id)
        }
        #expect(answered == Set(1...12))
        #expect(echoed >= 2, "\(echoed) of 12 echoed")
        #expect(host.count("worker process started") == 1)
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func aStoppedWorkerGetsNoMoreWorkAndIsReplaced() async throws {
        let host = try await startHost(
            arguments: ["--response-timeout", "3"],
            manifests: Fixtures.referenceManifests.merging(["w.json": Self.manifest()]) { $1 })
        let bystander = try await Self.bystander(host)
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "c", package: Self.package) == .success)
        let pid = try #require(Self.workerPid(in: host.log))
        let before = try #require(host.residentBytes)
        // The worker neither reads nor answers: 48 requests of 64 KiB (3 MiB, past what the
        // host buffers for a worker). Each is answered, by a timeout or a refusal.
        try #require(await Self.stop(pid), "the worker's threads did not all stop")
        let blob: ValueSet = ["Bytes": .bytes(Array(repeating: 1, count: 65_536))]
        for id in 1...48 {
            try await client.send(.request(RequestFrame(channel: 1, id: UInt64(id), message: EncodedValueSet(blob))))
        }
        var answered = 0
        var closed = false
        while answered < 48 || !closed {
            switch try await client.next(timeout: .seconds(15)) {
            case .response(let response):
                // Refused while the host held too much for the worker, answered as the worker was
                // killed, or (read by the host only after that, as the host stops reading a client
                // while it cannot pass its requests on) refused because the channel had closed.
                let afterTheClose =
                    response.status == .failure
                    && ["channel 1 is not open", "channel 1 is closing"].contains(response.error ?? "")
                #expect(
                    [.resourceLimitsExceeded, .appUnavailable].contains(response.status) || afterTheClose,
                    "\(response.status): \(response.error ?? "")")
                answered += 1
            case .closed(let frame):
                #expect(frame.channel == 1)
                closed = true
            case let other:
                Issue.record("unexpected \(String(describing: other))")
                answered = 48
                closed = true
            }
        }
        #expect(try await Self.echoes(bystander, 1))
        #expect(try #require(host.residentBytes) < before + 32 << 20)
        // It was killed (a stopped process dies of SIGKILL), and a new worker serves.
        #expect(try await Self.openWhenBack(client, channel: 2))
        #expect(try await client.request(channel: 2, id: 99, ["Int": 1]).status == .success)
        #expect(host.count("worker process started") == 2)
        await client.close()
        await bystander.close()
        #expect(await host.stop() == 0)
    }

    @Test(arguments: [true, false])
    func anOpenAnsweredByAVersionTheReloadRetiredIsNotOpened(inWorker: Bool) async throws {
        // In process, the retired plugin answers the open as it is drained before `destroy`.
        let manifest =
            inWorker ? Self.manifest() : Self.manifest().replacingOccurrences(of: #""isolation": "process","#, with: "")
        let host = try await startHost(manifests: Fixtures.referenceManifests.merging(["w.json": manifest]) { $1 })
        let client = try await connectedClient(host)
        // The worker's open sleeps 4 s; the manifest changes meanwhile (a reload takes well
        // under that, also in a build with AddressSanitizer on a loaded machine). Not longer:
        // a retired worker gives its plugin 5 s to finish.
        try await client.send(.open(OpenFrame(channel: 1, service: "sleep.4000", package: Self.package)))
        try await Task.sleep(for: .milliseconds(100))
        try host.installManifest(
            "w.json", manifest.replacingOccurrences(of: "\"library\"", with: "\"config\": {\"v\": 2}, \"library\""))
        let retired = try await client.next(timeout: .seconds(30))
        #expect(
            retired
                == .opened(
                    OpenedFrame(
                        channel: 1, status: .appUnavailable,
                        error: "package \"\(Self.package)\" was reloaded while it opened the channel: open again")),
            "\(String(describing: retired))")
        // The new version serves.
        #expect(await host.waitForLog("manifests reloaded", timeout: .seconds(30)))
        #expect(try await client.open(channel: 2, service: "c", package: Self.package) == .success)
        #expect(try await client.request(channel: 2, id: 1, ["Int": 1]).status == .success)
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func aWorkerThatCannotBeRestartedLeavesTheHostAndEveryoneElseAlone() async throws {
        // A copy of atriumd, deleted once it runs: the worker's restart cannot start anything.
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-exe-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: folder) }
        let copy = folder.appendingPathComponent("atriumd")
        try FileManager.default.copyItem(at: TestHost.buildFolder.appendingPathComponent("atriumd"), to: copy)
        let host = try await TestHost.start(
            manifests: Fixtures.referenceManifests.merging(["w.json": Self.manifest()]) { $1 },
            arguments: ["--plugin-path", TestHost.buildFolder.path], executable: copy)
        let bystander = try await Self.bystander(host)
        try FileManager.default.removeItem(at: copy)
        let pid = try #require(Self.workerPid(in: host.log))
        kill(pid, SIGKILL)
        #expect(await host.waitForLog("the worker could not be restarted", timeout: .seconds(5)), "\(host.log)")
        // The package is unavailable, says why, and the rest of the host serves.
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "c", package: Self.package) == .appUnavailable)
        #expect(try await Self.echoes(bystander, 1))
        // Removing the package (a reload) and stopping the host signal no process that is
        // not running: this test, in the host's process group, lives on to see the exit.
        try FileManager.default.removeItem(at: host.manifestsFolder.appendingPathComponent("w.json"))
        #expect(await host.waitForLog("removed \(Self.package)", timeout: .seconds(5)))
        #expect(try await Self.echoes(bystander, 2))
        await client.close()
        await bystander.close()
        #expect(await host.stop() == 0)
    }

    /// A worker is restarted after a crash only from a library that is still trusted: the
    /// library's path is checked again (StrictModes) before each start, since the worker loads
    /// what is there now.
    @Test func aWorkerIsNotRestartedFromALibraryNoLongerTrusted() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "atrium-retrust-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let library = folder.appendingPathComponent("libAtriumTestCService.so")
        try FileManager.default.copyItem(
            at: TestHost.buildFolder.appendingPathComponent("libAtriumTestCService.so"), to: library)
        chmod(library.path, 0o755)
        let manifest = Self.manifest().replacingOccurrences(
            of: "\"libAtriumTestCService.so\"", with: "\"\(library.path)\"")
        let host = try await startHost(manifests: Fixtures.referenceManifests.merging(["w.json": manifest]) { $1 })
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "c", package: Self.package) == .success)
        // Someone made it writable by others, then the worker crashed.
        chmod(library.path, 0o666)
        try await client.send(.request(RequestFrame(channel: 1, id: 2, message: EncodedValueSet(["Crash": "exit"]))))
        // The request in flight answered AppUnavailable, and the channel closed, in either order.
        var frames: [HostFrame?] = []
        for _ in 0..<2 { frames.append(try await client.next(timeout: .seconds(10))) }
        #expect(
            frames.contains { if case .response(let answer) = $0 { answer.status == .appUnavailable } else { false } })
        #expect(frames.contains { if case .closed(let closed) = $0 { closed.channel == 1 } else { false } })
        #expect(
            await host.waitForLog(
                "the worker could not be restarted: the plugin library \(library.path) is writable by other users"),
            "\(host.lastLines())")
        #expect(try await client.open(channel: 2, service: "c", package: Self.package) == .appUnavailable)
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func whatAPluginStartedGoesWithItsWorker() async throws {
        let host = try await Self.startWorkerHost()
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "c", package: Self.package) == .success)
        let answer = try await client.request(channel: 1, id: 1, ["Fork": true])
        let child = pid_t(try #require(try answer.decoded["Child"]?.int))
        #expect(Self.isAlive(child))
        try await client.send(.request(RequestFrame(channel: 1, id: 2, message: EncodedValueSet(["Crash": "exit"]))))
        // The child keeps the worker's pipes open: the host finds the worker's end all the
        // same (within a second or two), answers, and ends the child with it.
        #expect(try await client.response(timeout: .seconds(10)).status == .appUnavailable)
        // The worker is gone, and so is the child it left behind (within 5 s).
        let deadline = ContinuousClock.now + .seconds(5)
        while Self.isAlive(child), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(!Self.isAlive(child))
        await client.close()
        let status = await host.stop()
        #expect(
            status == 0,
            "exit status \(status.map(String.init) ?? "none: it did not exit in time"); \(host.lastLines())")
    }

    @Test(arguments: [true, false])
    func anOpenTheServiceDoesNotAnswerInTimeIsRefusedAsUnknown(inWorker: Bool) async throws {
        let manifest =
            inWorker ? Self.manifest() : Self.manifest().replacingOccurrences(of: #""isolation": "process","#, with: "")
        let host = try await startHost(
            arguments: ["--response-timeout", "5"],
            manifests: Fixtures.referenceManifests.merging(["w.json": manifest]) { $1 })
        let client = try await connectedClient(host)
        // The service takes 8 s to accept: the client hears Unknown at the response timeout.
        try await client.send(.open(OpenFrame(channel: 1, service: "sleep.8000", package: Self.package)))
        #expect(
            try await client.next(timeout: .seconds(30))
                == .opened(
                    OpenedFrame(
                        channel: 1, status: .unknown,
                        error: "the service did not answer open within 5 seconds (the host's response timeout)")))
        #expect(await host.waitForLog("did not answer open within 5 seconds"))
        // Its late acceptance (at 8 s; the serial plugin is busy until then, and answers the
        // next open only after it) opens nothing: the next frame is the answer to the next open.
        #expect(try await client.open(channel: 2, service: "c", package: Self.package) == .success)
        #expect(try await client.request(channel: 2, id: 1, ["Int": 1]).status == .success)
        await client.close()
        #expect(await host.stop() == 0)
    }

    /// Whether `pid` runs (a zombie waiting for its parent to reap it does not).
    static func isAlive(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return false }
        let state = stat[stat.index(close, offsetBy: 2)]
        return state != "Z" && state != "X"
    }

    /// Stops process `pid` (SIGSTOP) and waits, at most 5 seconds, until every thread of it has
    /// stopped. A stop is not at once: the kernel stops the threads of a process one by one,
    /// as each next runs, and a thread woken by data before its turn could still read it.
    static func stop(_ pid: pid_t) async -> Bool {
        kill(pid, SIGSTOP)
        return await eventually(within: .seconds(5), every: .milliseconds(5)) {
            let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
            let states = threads.compactMap { thread -> Character? in
                // "pid (name) S ...": the state follows the name, which may hold spaces and ")".
                guard let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(thread)/stat", encoding: .utf8),
                    let close = stat.lastIndex(of: ")")
                else { return nil }
                return stat[close...].dropFirst().first { $0 != " " }
            }
            return !threads.isEmpty && states.count == threads.count && states.allSatisfy { $0 == "T" || $0 == "t" }
        }
    }

    /// The pid of the first worker the host started, from its log.
    static func workerPid(in log: String) -> pid_t? {
        guard let range = log.range(of: "worker process started (pid ") else { return nil }
        return pid_t(log[range.upperBound...].prefix { $0.isNumber })
    }

    @Test func aWorkerThatKeepsCrashingIsGivenUp() async throws {
        let host = try await Self.startWorkerHost()
        let client = try await connectedClient(host)
        var channel: UInt64 = 1
        for _ in 0..<5 {
            #expect(try await Self.openWhenBack(client, channel: channel))
            try await client.send(
                .request(RequestFrame(channel: channel, id: channel, message: EncodedValueSet(["Crash": "exit"]))))
            #expect(try await client.response().status == .appUnavailable)
            _ = try await client.next()
            channel += 1
        }
        #expect(await host.waitForLog("is given up"))
        // From then on the package answers AppUnavailable at once, and says why in the log.
        #expect(try await client.open(channel: channel, service: "c", package: Self.package) == .appUnavailable)
        #expect(host.logged("crashed 5 times within 60 seconds"))
        // Until a reload: its manifest has not changed, but it is tried again, and serves.
        // (The reload waits for the new worker to load its plugin: slow beside the rest of the
        // suite under AddressSanitizer.)
        kill(host.process.processIdentifier, SIGHUP)
        #expect(
            await host.waitForLog(
                "manifests reloaded (SIGHUP): retried \(Self.package) (had failed)", timeout: .seconds(10)))
        #expect(try await Self.openWhenBack(client, channel: channel + 1))
        let answer = try await client.request(channel: channel + 1, id: 100, ["Int": 1])
        #expect(answer.status == .success)
        #expect(try answer.decoded["IntPlusOne"] == .int(2))
        // A package that serves is not touched by the next reload.
        kill(host.process.processIdentifier, SIGHUP)
        #expect(
            await host.waitForLog(
                "manifests reloaded (SIGHUP): \(Fixtures.referenceManifests.count + 1) unchanged",
                timeout: .seconds(10)))
        #expect(try await client.request(channel: channel + 1, id: 101, ["Int": 2]).decoded["IntPlusOne"] == .int(3))
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func workersStuckWhileLoadingFailTogetherAtTheStartTimeout() async throws {
        // Three plugins that never return from create: each package fails when the start
        // timeout (10 s) has passed since its worker began, all at once, not one timeout after
        // another (which would be 30 s, past the 25 s this test waits for the host to be ready).
        var manifests = Fixtures.referenceManifests
        for n in 1...3 {
            manifests["hang\(n).json"] = """
                { "manifestVersion": 1, "package": "atrium.tests.hang\(n)", "library": "libAtriumTestCService.so",
                  "isolation": "process", "config": { "hangInCreate": true },
                  "services": [{ "name": "c", "supportsRemoteSystems": true }] }
                """
        }
        let host = try await TestHost.start(manifests: manifests, readyWithin: 25)
        #expect(host.count("package not available: the worker process did not load the plugin within 10 seconds") == 3)
        let client = try await connectedClient(host)
        for n in 1...3 {
            #expect(
                try await client.open(channel: UInt64(n), service: "c", package: "atrium.tests.hang\(n)")
                    == .appUnavailable)
        }
        #expect(
            try await client.open(channel: 9, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        // The stuck workers were killed: none is left behind.
        let pids = host.log.components(separatedBy: "worker process started (pid ").dropFirst()
            .compactMap { pid_t($0.prefix { $0.isNumber }) }
        #expect(pids.count == 3)
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline, pids.contains(where: { Self.isAlive($0) }) {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(!pids.contains(where: { Self.isAlive($0) }))
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func aWorkerRunsAsTheManifestsUser() async throws {
        // "nobody" must be able to read the library wherever the repository is: a copy of it
        // goes to a folder anyone may enter.
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-user-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: folder) }
        chmod(folder.path, 0o755)
        let library = folder.appendingPathComponent("libAtriumTestCService.so")
        try FileManager.default.copyItem(
            at: TestHost.buildFolder.appendingPathComponent("libAtriumTestCService.so"), to: library)
        chmod(library.path, 0o644)
        let manifest = Self.manifest(user: "nobody").replacingOccurrences(
            of: "\"libAtriumTestCService.so\"", with: "\"\(library.path)\"")
        let host = try await startHost(manifests: Fixtures.referenceManifests.merging(["w.json": manifest]) { $1 })
        let client = try await connectedClient(host)
        let status = try await client.open(channel: 1, service: "c", package: Self.package)
        if getuid() == 0 {
            #expect(status == .success, "\(host.log)")
            let answer = try await client.request(channel: 1, id: 1, ["Uid": true])
            #expect(try answer.decoded["Uid"] == .int(65534))
        } else {
            // Only root may switch users: the package is unavailable, and the log says why.
            #expect(status == .appUnavailable)
            #expect(host.logged("does not run as root, so its worker cannot run as \"nobody\""))
        }
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func aLibraryThatDoesNotLoadInItsWorkerIsReported() async throws {
        let broken = """
            { "manifestVersion": 1, "package": "atrium.tests.notaplugin", "library": "libffitypes.so",
              "isolation": "process", "services": [{ "name": "x", "supportsRemoteSystems": true }] }
            """
        let host = try await startHost(manifests: ["b.json": broken])
        #expect(host.logged("package atrium.tests.notaplugin"))
        #expect(host.logged("atrium_plugin_entry_v1"), "\(host.log)")
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "x", package: "atrium.tests.notaplugin") == .appUnavailable)
        await client.close()
        #expect(await host.stop() == 0)
    }
}
