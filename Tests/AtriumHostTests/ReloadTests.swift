import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// Manifests reloaded while the host serves: on a change in the folder (inotify) and on
/// SIGHUP. Each test keeps a connection with an Echo channel open throughout and checks it is
/// never dropped. Waits are bounded in time.
@Suite(.serialized) struct ReloadTests {
    static let testServiceManifest = Fixtures.all["test-service.json"]!

    func write(_ host: TestHost, _ name: String, _ json: String) throws {
        try host.installManifest(name, json)
    }

    /// Waits (at most 10 s: a reload may start a worker, and wait for an old one to stop) until
    /// the host has logged `count` reloads.
    func reloaded(_ host: TestHost, count: Int) async -> Bool {
        await eventually(within: .seconds(10)) { host.count("manifests reloaded") >= count }
    }

    /// A new folder for a test's libraries (the test removes it).
    func scratchFolder(_ name: String) throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "atrium-\(name)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
        return folder
    }

    func apps(_ client: TestClient, id: UInt64) async throws -> [String: AppInfo] {
        try await client.send(.apps(id: id))
        let frame = try await client.next()
        guard case .apps(let frame) = frame else {
            Issue.record("expected apps, got \(String(describing: frame))")
            return [:]
        }
        return Dictionary(uniqueKeysWithValues: frame.apps.map { ($0.package, $0) })
    }

    func echoes(_ client: TestClient, _ n: Int) async throws -> Bool {
        let answer = try await client.request(channel: 1, id: UInt64(1000 + n), ["n": .int(Int64(n))])
        let decoded = try answer.decoded
        return answer.status == .success && decoded == ["n": .int(Int64(n))]
    }

    @Test func addedChangedAndRemovedPackagesWithoutDroppingAConnection() async throws {
        let host = try await TestHost.start(manifests: Fixtures.referenceManifests)
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        #expect(try await apps(client, id: 1)[Fixtures.testPackage] == nil)

        // Added: available at once.
        try write(host, "test-service.json", Self.testServiceManifest)
        #expect(await reloaded(host, count: 1))
        #expect(host.logged("added \(Fixtures.testPackage)"))
        #expect(try await apps(client, id: 2)[Fixtures.testPackage]?.displayName == "Test Service")
        #expect(try await client.open(channel: 2, service: "test", package: Fixtures.testPackage) == .success)
        #expect(try await echoes(client, 1))

        // Changed: restarted; its channel closes (Canceled), the new version serves.
        try write(
            host, "test-service.json",
            Self.testServiceManifest.replacingOccurrences(of: "\"Test Service\"", with: "\"Test Service 2\""))
        #expect(await reloaded(host, count: 2))
        #expect(try await client.next() == .closed(ClosedFrame(channel: 2, status: .canceled)))
        #expect(host.logged("restarted \(Fixtures.testPackage) (changed)"))
        #expect(try await apps(client, id: 3)[Fixtures.testPackage]?.displayName == "Test Service 2")
        #expect(try await client.open(channel: 3, service: "test", package: Fixtures.testPackage) == .success)
        #expect(try await echoes(client, 2))

        // Removed: its channel closes, and it is gone.
        try FileManager.default.removeItem(at: host.manifestsFolder.appendingPathComponent("test-service.json"))
        #expect(await reloaded(host, count: 3))
        #expect(try await client.next() == .closed(ClosedFrame(channel: 3, status: .canceled)))
        #expect(host.logged("removed \(Fixtures.testPackage)"))
        #expect(try await apps(client, id: 4)[Fixtures.testPackage] == nil)
        #expect(try await client.open(channel: 4, service: "test", package: Fixtures.testPackage) == .appNotInstalled)
        #expect(try await echoes(client, 3))
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func aManifestThatNoLongerPassesLeavesItsPackageRunning() async throws {
        let host = try await startHost()
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        #expect(try await client.open(channel: 2, service: "test", package: Fixtures.testPackage) == .success)
        try write(host, "test-service.json", #"{ "manifestVersion": 1, "package": "#)
        #expect(await reloaded(host, count: 1))
        #expect(host.logged("kept \(Fixtures.testPackage) as it was: test-service.json"), "\(host.log)")
        // Still there, and the open channel still answers.
        #expect(try await apps(client, id: 1)[Fixtures.testPackage] != nil)
        let answer = try await client.request(channel: 2, id: 1, ["Action": "echo", "x": 1])
        #expect(answer.status == .success)
        #expect(try await echoes(client, 1))
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func sighupReloadsWhenWatchingIsOff() async throws {
        let host = try await TestHost.start(manifests: Fixtures.referenceManifests, arguments: ["--no-watch"])
        #expect(host.logged("manifests are reloaded on SIGHUP only (no-watch is set)"))
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        try write(host, "test-service.json", Self.testServiceManifest)
        try await Task.sleep(for: .seconds(1))
        #expect(host.count("manifests reloaded") == 0)
        #expect(try await apps(client, id: 1)[Fixtures.testPackage] == nil)
        kill(host.process.processIdentifier, SIGHUP)
        #expect(await reloaded(host, count: 1))
        #expect(host.logged("manifests reloaded (SIGHUP): added \(Fixtures.testPackage)"))
        #expect(try await apps(client, id: 2)[Fixtures.testPackage] != nil)
        #expect(try await echoes(client, 1))
        await client.close()
        #expect(await host.stop() == 0)
    }

    /// What the host watches is in place once it says it is ready: the log says what is
    /// watched before that, and a SIGHUP (systemctl reload) sent as soon as it is ready reloads.
    @Test func whatTheHostWatchesIsInPlaceOnceItSaysItIsReady() async throws {
        let host = try await TestHost.start(manifests: Fixtures.referenceManifests)
        kill(host.process.processIdentifier, SIGHUP)
        let log = host.log
        let watching = try #require(
            log.range(of: "manifests are reloaded on a change in \(host.manifestsFolder.path), and on SIGHUP"),
            "\(host.lastLines())")
        let ready = try #require(log.range(of: "atriumd: ready"))
        #expect(watching.lowerBound < ready.lowerBound, "watched only after the host said it was ready")
        #expect(await reloaded(host, count: 1))
        #expect(host.logged("manifests reloaded (SIGHUP)"))
        #expect(await host.stop() == 0)
    }

    @Test func aPackageWhoseLibraryWasMissingLoadsOnTheNextReload() async throws {
        // The library is installed after the host started: SIGHUP (or any change in the
        // folder) tries the package again, though its manifest is the same.
        let folder = try scratchFolder("late")
        defer { try? FileManager.default.removeItem(at: folder) }
        let library = folder.appendingPathComponent("libEcho.so")
        let manifest = """
            { "manifestVersion": 1, "package": "atrium.tests.late", "library": "\(library.path)",
              "services": [{ "name": "atrium.echo", "supportsRemoteSystems": true }] }
            """
        let host = try await TestHost.start(
            manifests: Fixtures.referenceManifests.merging(["late.json": manifest]) { $1 }, arguments: ["--no-watch"])
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        #expect(try await apps(client, id: 1)["atrium.tests.late"]?.state == "failed")
        #expect(
            try await client.open(channel: 2, service: "atrium.echo", package: "atrium.tests.late") == .appUnavailable)
        // A reload with the library still missing leaves it failed, and says so again.
        kill(host.process.processIdentifier, SIGHUP)
        #expect(await reloaded(host, count: 1))
        #expect(host.logged("manifests reloaded (SIGHUP): tried atrium.tests.late again: still not available"))
        #expect(!host.logged("retried"))
        #expect(host.count("package not available: library \(library.path) not found") == 2)
        #expect(try await apps(client, id: 2)["atrium.tests.late"]?.state == "failed")

        try FileManager.default.copyItem(at: TestHost.buildFolder.appendingPathComponent("libEcho.so"), to: library)
        kill(host.process.processIdentifier, SIGHUP)
        #expect(await reloaded(host, count: 2))
        #expect(host.logged("manifests reloaded (SIGHUP): retried atrium.tests.late (had failed)"))
        #expect(try await apps(client, id: 3)["atrium.tests.late"]?.state == "ready")
        #expect(try await client.open(channel: 3, service: "atrium.echo", package: "atrium.tests.late") == .success)
        let answer = try await client.request(channel: 3, id: 1, ["late": true])
        #expect(answer.status == .success)
        #expect(try answer.decoded == ["late": true])
        // The packages that served all along were not restarted: the first channel still answers.
        #expect(try await echoes(client, 1))
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func aReplacedLibraryLoadedIntoTheHostBeforeIsNamedAsTheCause() async throws {
        // An in-process library that loaded but is no Atrium plugin (no entry symbol) stays in
        // the host's process. The right library installed over it at the same path cannot
        // take its place: the retry says so, and what to do, instead of repeating the old
        // reason as if nothing had been installed.
        let folder = try scratchFolder("stale")
        defer { try? FileManager.default.removeItem(at: folder) }
        let library = folder.appendingPathComponent("libStale.so")
        try FileManager.default.copyItem(at: TestHost.buildFolder.appendingPathComponent("libmathdemo.so"), to: library)
        let manifest = """
            { "manifestVersion": 1, "package": "atrium.tests.stale", "library": "\(library.path)",
              "services": [{ "name": "atrium.echo", "supportsRemoteSystems": true }] }
            """
        let host = try await TestHost.start(
            manifests: Fixtures.referenceManifests.merging(["stale.json": manifest]) { $1 }, arguments: ["--no-watch"])
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        #expect(host.logged("libStale.so does not export atrium_plugin_entry_v1"))
        #expect(!host.logged("was replaced after this host first loaded it"))

        // Installed as package managers do: a new file renamed over the old one.
        let fresh = folder.appendingPathComponent("libStale.so.new")
        try FileManager.default.copyItem(at: TestHost.buildFolder.appendingPathComponent("libEcho.so"), to: fresh)
        #expect(rename(fresh.path, library.path) == 0)
        kill(host.process.processIdentifier, SIGHUP)
        #expect(await reloaded(host, count: 1))
        #expect(host.logged("tried atrium.tests.stale again: still not available"))
        #expect(host.logged("\(library.path) was replaced after this host first loaded it"))
        #expect(host.logged("restart atriumd to load the new one"))
        #expect(try await apps(client, id: 1)["atrium.tests.stale"]?.state == "failed")
        #expect(
            try await client.open(channel: 2, service: "atrium.echo", package: "atrium.tests.stale") == .appUnavailable)
        #expect(try await echoes(client, 1))
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func aLibraryInstalledAnewRestartsItsWorkerAndIsNamedForAnInProcessPackage() async throws {
        // Both packages' manifests stay as they are; their libraries are installed anew (a new
        // file renamed over the old, as package managers do). A reload restarts the worker
        // package, whose new worker loads the new file; the in-process package cannot load it
        // again, keeps serving, and the log says why its code did not change.
        let folder = try scratchFolder("new")
        defer { try? FileManager.default.removeItem(at: folder) }
        let inProcess = folder.appendingPathComponent("libServe.so")
        let isolated = folder.appendingPathComponent("libWorker.so")
        func install(_ built: String, as library: URL) throws {
            let fresh = library.appendingPathExtension("new")
            try FileManager.default.copyItem(at: TestHost.buildFolder.appendingPathComponent(built), to: fresh)
            #expect(rename(fresh.path, library.path) == 0)
        }
        try install("libEcho.so", as: inProcess)
        try install("libAtriumTestCService.so", as: isolated)
        var manifests = Fixtures.referenceManifests
        manifests["serve.json"] = """
            { "manifestVersion": 1, "package": "atrium.tests.serve", "library": "\(inProcess.path)",
              "services": [{ "name": "atrium.echo", "supportsRemoteSystems": true }] }
            """
        manifests["wlib.json"] = """
            { "manifestVersion": 1, "package": "atrium.tests.wlib", "library": "\(isolated.path)",
              "isolation": "process", "services": [{ "name": "c", "supportsRemoteSystems": true }] }
            """
        let host = try await TestHost.start(manifests: manifests, arguments: ["--no-watch"])
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        #expect(try await client.open(channel: 2, service: "atrium.echo", package: "atrium.tests.serve") == .success)
        #expect(try await client.open(channel: 3, service: "c", package: "atrium.tests.wlib") == .success)
        #expect(try await client.request(channel: 3, id: 1, ["Int": 1]).decoded["IntPlusOne"] == .int(2))

        // A reload with nothing installed touches neither.
        kill(host.process.processIdentifier, SIGHUP)
        #expect(await reloaded(host, count: 1))
        #expect(host.logged("manifests reloaded (SIGHUP): \(manifests.count) unchanged"))
        #expect(!host.logged("was replaced"))

        try install("libEcho.so", as: inProcess)
        try install("libAtriumTestCService.so", as: isolated)
        kill(host.process.processIdentifier, SIGHUP)
        #expect(await reloaded(host, count: 2))
        #expect(
            host.logged(
                "manifests reloaded (SIGHUP): restarted atrium.tests.wlib (its library was replaced); \(manifests.count - 1) unchanged"
            ))
        #expect(host.logged("\(inProcess.path) was replaced after this host first loaded it"))
        #expect(!host.logged("\(isolated.path) was replaced"))
        #expect(host.count("worker process started") == 2)
        // The worker package's channel closed as a changed package's does; it opens again.
        #expect(try await client.next() == .closed(ClosedFrame(channel: 3, status: .canceled)))
        #expect(try await client.open(channel: 4, service: "c", package: "atrium.tests.wlib") == .success)
        #expect(try await client.request(channel: 4, id: 2, ["Int": 2]).decoded["IntPlusOne"] == .int(3))
        // The in-process package and every other connection kept serving.
        let answer = try await client.request(channel: 2, id: 3, ["still": true])
        #expect(answer.status == .success)
        #expect(try answer.decoded == ["still": true])
        #expect(try await echoes(client, 1))

        // The new worker runs the file now installed: the next reload restarts nothing.
        kill(host.process.processIdentifier, SIGHUP)
        #expect(await reloaded(host, count: 3))
        #expect(host.count("manifests reloaded (SIGHUP): \(manifests.count) unchanged") == 2)
        #expect(host.count("worker process started") == 2)
        // The in-process package's old code still runs: each reload says so.
        #expect(host.count("\(inProcess.path) was replaced after this host first loaded it") == 2)

        // A library removed is no new library to load: nothing restarts, nothing is claimed.
        try FileManager.default.removeItem(at: inProcess)
        try FileManager.default.removeItem(at: isolated)
        kill(host.process.processIdentifier, SIGHUP)
        #expect(await reloaded(host, count: 4))
        #expect(host.count("manifests reloaded (SIGHUP): \(manifests.count) unchanged") == 3)
        #expect(host.count("was replaced after this host first loaded it") == 2)
        #expect(host.count("worker process started") == 2)
        #expect(try await client.request(channel: 4, id: 4, ["Int": 4]).decoded["IntPlusOne"] == .int(5))
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func aFolderReplacedWholeIsWatchedWhereItsPathNowLeads() async throws {
        // A deploy that stages a new folder and renames it over the old (moved aside first):
        // the reload reads the new folder, and a change in it later is seen too.
        let host = try await TestHost.start(manifests: Fixtures.referenceManifests)
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        let folder = host.manifestsFolder
        let staged = folder.appendingPathExtension("new")
        let aside = folder.appendingPathExtension("old")
        defer { try? FileManager.default.removeItem(at: aside) }
        try TestHost.writeManifests(
            Fixtures.referenceManifests.merging(["test-service.json": Self.testServiceManifest]) { $1 }, to: staged)
        #expect(rename(folder.path, aside.path) == 0)
        #expect(rename(staged.path, folder.path) == 0)
        #expect(await host.waitForLog("added \(Fixtures.testPackage)", timeout: .seconds(10)))
        #expect(try await apps(client, id: 1)[Fixtures.testPackage] != nil)

        try FileManager.default.removeItem(at: folder.appendingPathComponent("test-service.json"))
        #expect(await host.waitForLog("removed \(Fixtures.testPackage)", timeout: .seconds(10)))
        #expect(try await apps(client, id: 2)[Fixtures.testPackage] == nil)
        #expect(try await echoes(client, 1))
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func aFolderBehindASymbolicLinkIsWatchedWhereTheLinkNowPoints() async throws {
        // --manifests names a link to a release's folder; the link is pointed at the next
        // release (a new link renamed over it).
        let scratch = try scratchFolder("releases")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let first = scratch.appendingPathComponent("1")
        let second = scratch.appendingPathComponent("2")
        let current = scratch.appendingPathComponent("current")
        try TestHost.writeManifests(Fixtures.referenceManifests, to: first)
        try TestHost.writeManifests(
            Fixtures.referenceManifests.merging(["test-service.json": Self.testServiceManifest]) { $1 }, to: second)
        #expect(symlink(first.path, current.path) == 0)
        let host = try await TestHost.start(manifestsFolder: current)
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        #expect(try await apps(client, id: 1)[Fixtures.testPackage] == nil)

        let next = scratch.appendingPathComponent("current.next")
        #expect(symlink(second.path, next.path) == 0)
        #expect(rename(next.path, current.path) == 0)
        #expect(await host.waitForLog("added \(Fixtures.testPackage)", timeout: .seconds(10)))

        // The release the link now points at is the one watched.
        try FileManager.default.removeItem(at: second.appendingPathComponent("test-service.json"))
        #expect(await host.waitForLog("removed \(Fixtures.testPackage)", timeout: .seconds(10)))
        #expect(try await echoes(client, 1))
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func aFolderRemovedAndMadeAgainIsWatchedAgain() async throws {
        let host = try await TestHost.start(manifests: Fixtures.referenceManifests)
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        let folder = host.manifestsFolder
        try FileManager.default.removeItem(at: folder)
        // While there is no folder, the reload changes nothing, and says why.
        #expect(
            await host.waitForLog(
                "reload (the manifests folder changed) skipped, every package stays as it was", timeout: .seconds(10)))
        #expect(try await echoes(client, 1))
        try TestHost.writeManifests(
            Fixtures.referenceManifests.merging(["test-service.json": Self.testServiceManifest]) { $1 }, to: folder)
        #expect(await host.waitForLog("added \(Fixtures.testPackage)", timeout: .seconds(10)))
        // The folder made again is the one watched.
        try FileManager.default.removeItem(at: folder.appendingPathComponent("test-service.json"))
        #expect(await host.waitForLog("removed \(Fixtures.testPackage)", timeout: .seconds(10)))
        #expect(try await echoes(client, 2))
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func aChangedWorkerPackageGetsANewWorker() async throws {
        let manifest = WorkerIsolationTests.manifest()
        let host = try await startHost(
            arguments: ["--log-level", "debug"],
            manifests: Fixtures.referenceManifests.merging(["w.json": manifest]) { $1 })
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        #expect(try await client.open(channel: 2, service: "c", package: WorkerIsolationTests.package) == .success)
        #expect(host.count("worker process started") == 1)
        #expect(!host.logged("a backend was let go"))
        try write(
            host, "w.json",
            manifest.replacingOccurrences(of: "\"isolation\"", with: "\"config\": {\"v\": 2}, \"isolation\""))
        #expect(await reloaded(host, count: 1))
        #expect(try await client.next() == .closed(ClosedFrame(channel: 2, status: .canceled)))
        #expect(host.count("worker process started") == 2)
        #expect(try await client.open(channel: 3, service: "c", package: WorkerIsolationTests.package) == .success)
        #expect(try await client.request(channel: 3, id: 1, ["Int": 1]).status == .success)
        #expect(try await echoes(client, 1))
        // What the old worker's backend held is given back to the system a few seconds later
        // (looked at every 2 s, given back at the second look).
        #expect(await host.waitForLog("a backend was let go: freed memory", timeout: .seconds(10)))
        await client.close()
        #expect(await host.stop() == 0)
        // The old worker was shut down, not lost.
        #expect(!host.logged("exited with status"))
    }

    @Test func everyManifestsFolderIsWatchedAndAnEarlierOneTakesALaterOnesPlace() async throws {
        let second = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-second-\(UUID().uuidString)")
        try TestHost.writeManifests([:], to: second)
        defer { try? FileManager.default.removeItem(at: second) }
        let host = try await TestHost.start(
            manifests: Fixtures.referenceManifests, arguments: ["--manifests", second.path])
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)

        // A manifest added to the second folder is served at once.
        try TestHost.install(Self.testServiceManifest, at: second.appendingPathComponent("test-service.json"))
        #expect(await reloaded(host, count: 1))
        #expect(try await apps(client, id: 1)[Fixtures.testPackage]?.displayName == "Test Service")

        // One of the same name in the first folder takes its place, and the log says so.
        try TestHost.install(
            Self.testServiceManifest.replacingOccurrences(of: "Test Service", with: "Edited Test Service"),
            at: host.manifestsFolder.appendingPathComponent("test-service.json"))
        #expect(await reloaded(host, count: 2))
        #expect(try await apps(client, id: 2)[Fixtures.testPackage]?.displayName == "Edited Test Service")
        #expect(
            host.logged(
                "\(second.path)/test-service.json is not read: \(host.manifestsFolder.path)/test-service.json takes its place"
            ))

        // The same package under another name in the second folder is a clash: refused, said.
        try TestHost.install(Self.testServiceManifest, at: second.appendingPathComponent("zz-copy.json"))
        #expect(await reloaded(host, count: 3))
        // Named with the line of its "package" key, as every manifest problem is.
        let packageLine = try #require(
            Self.testServiceManifest.split(separator: "\n", omittingEmptySubsequences: false).firstIndex {
                $0.contains("\"package\"")
            })
        #expect(
            host.logged(
                "\(second.path)/zz-copy.json:\(packageLine + 1): package: \"\(Fixtures.testPackage)\" is already declared by"
            ))
        #expect(try await apps(client, id: 3)[Fixtures.testPackage]?.displayName == "Edited Test Service")
        #expect(try await echoes(client, 1))

        // A manifest broken in an edit keeps its package as it was, with several folders too
        // (where problems name files by their paths). Without the copy, which would then
        // declare the package unopposed.
        try FileManager.default.removeItem(at: second.appendingPathComponent("zz-copy.json"))
        #expect(await reloaded(host, count: 4))
        try TestHost.install("{ not json", at: host.manifestsFolder.appendingPathComponent("test-service.json"))
        #expect(await reloaded(host, count: 5))
        #expect(
            host.logged("kept \(Fixtures.testPackage) as it was: \(host.manifestsFolder.path)/test-service.json:1:"))
        #expect(try await apps(client, id: 4)[Fixtures.testPackage]?.displayName == "Edited Test Service")
        await client.close()
        #expect(await host.stop() == 0)
    }
}
