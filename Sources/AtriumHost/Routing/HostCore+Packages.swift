import AtriumProtocol
import AtriumValues
import Dispatch
import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// The packages at one moment: an immutable snapshot, swapped whole on reload, so that a
/// reader never sees half of a reload.
struct PackageRegistry: Sendable {
    var packages: [LoadedPackage] = []
    var index: [String: Int] = [:]

    init(_ packages: [LoadedPackage] = []) {
        self.packages = packages
        index = Dictionary(packages.enumerated().map { ($0.element.manifest.package, $0.offset) }) { first, _ in first }
    }

    func package(_ name: String) -> LoadedPackage? {
        index[name].map { packages[$0] }
    }
}

/// What a reload did, for the log and for `atriumd`.
public struct ReloadReport: Sendable, CustomStringConvertible {
    public var added: [String] = []
    public var removed: [String] = []
    public var changed: [String] = []
    /// Packages in worker processes whose manifest did not change but whose library file was
    /// replaced: restarted, so that the new worker loads it.
    public var libraryReplaced: [String] = []
    /// Packages that had failed (their library did not load, or their worker was given up),
    /// their manifest unchanged: started anew, and now serving.
    public var retried: [String] = []
    /// Packages that had failed, were tried again, changed or not, and failed again (the log
    /// says why, in a line of its own).
    public var stillFailed: [String] = []
    public var unchanged = 0
    /// Packages whose new manifest or library was refused: the running version stays, and why.
    public var keptRunning: [(package: String, reason: String)] = []

    public var description: String {
        var parts: [String] = []
        if !added.isEmpty { parts.append("added \(added.joined(separator: ", "))") }
        if !removed.isEmpty { parts.append("removed \(removed.joined(separator: ", "))") }
        if !changed.isEmpty { parts.append("restarted \(changed.joined(separator: ", ")) (changed)") }
        if !libraryReplaced.isEmpty {
            parts.append("restarted \(libraryReplaced.joined(separator: ", ")) (its library was replaced)")
        }
        if !retried.isEmpty { parts.append("retried \(retried.joined(separator: ", ")) (had failed)") }
        if !stillFailed.isEmpty {
            parts.append("tried \(stillFailed.joined(separator: ", ")) again: still not available")
        }
        parts.append("\(unchanged) unchanged")
        for kept in keptRunning { parts.append("kept \(kept.package) as it was: \(kept.reason)") }
        return parts.joined(separator: "; ")
    }
}

extension HostCore {
    /// Loads the packages of `directory`'s manifests, in order. A plugin that fails to load is
    /// recorded with its reason; the others load regardless. Call once, before serving.
    public func load(_ directory: ManifestDirectory) {
        let loaded = reloading.withLock { queues in makePackages(directory.manifests, libraryQueues: &queues) }
        registry.withLock { $0 = PackageRegistry(loaded) }
    }

    /// Brings the packages in line with `directory` while the host serves: new packages
    /// become available, removed ones close their channels (status Canceled) and stop,
    /// changed ones (any field of the manifest) start anew and then replace the old, whose
    /// channels close. A package whose new manifest is refused, or whose new version does
    /// not load, keeps running as it was. A package that had failed (its library did not
    /// load, or its worker crashed until it was given up) is tried again, changed or not: it
    /// has no channel to lose. A package in a worker whose library file was replaced restarts
    /// as a changed one does; one in process cannot load it again, and the log says so.
    /// Connections are never dropped. Blocks while plugins load: call it off the event loops.
    @discardableResult
    public func reload(_ directory: ManifestDirectory) -> ReloadReport? {
        reloading.withLock { queues -> ReloadReport? in
            // Shutdown stops the packages under this same lock: a reload never races it.
            guard !isShuttingDown else { return nil }
            var report = ReloadReport()
            let old = registry.withLock { $0 }
            var next: [LoadedPackage] = []
            var retired: [(LoadedPackage, String)] = []
            // A new version that did not load is let go too.
            var discarded = false
            var seen: Set<String> = []
            // Worker packages whose library was installed anew restart; decided once, since a
            // worker that restarts after a crash meanwhile loads the new file itself.
            let replacedWorkers = Set(
                old.packages.filter { $0.isWorker && $0.libraryReplaced }.map(\.manifest.package))
            // The new, changed, failed and replaced packages start together.
            let starting = directory.manifests.filter { manifest in
                old.package(manifest.package).map {
                    $0.manifest != manifest || $0.hasFailed || replacedWorkers.contains(manifest.package)
                } ?? true
            }
            var started = Dictionary(
                zip(starting.map(\.package), makePackages(starting, libraryQueues: &queues))
            ) { first, _ in first }
            for manifest in directory.manifests {
                seen.insert(manifest.package)
                guard let current = old.package(manifest.package) else {
                    next.append(
                        started.removeValue(forKey: manifest.package) ?? makePackage(manifest, libraryQueues: &queues))
                    report.added.append(manifest.package)
                    continue
                }
                let retrying = current.hasFailed
                let replacedLibrary = replacedWorkers.contains(manifest.package)
                if current.manifest == manifest, !retrying, !replacedLibrary {
                    if !current.isWorker, current.libraryReplaced, let path = current.libraryPath {
                        logger.warning(
                            "\(PluginLibrary.replacedNote(path, plugin: manifest.functions.isEmpty))",
                            metadata: ["package": "\(manifest.package)"])
                    }
                    next.append(current)
                    report.unchanged += 1
                    continue
                }
                let replacement =
                    started.removeValue(forKey: manifest.package) ?? makePackage(manifest, libraryQueues: &queues)
                if let error = replacement.loadError, !retrying {
                    next.append(current)
                    report.keptRunning.append((manifest.package, "its new version does not load: \(error)"))
                    discarded = true
                    continue
                }
                next.append(replacement)
                if retrying, replacement.hasFailed {
                    retired.append((current, "package \(manifest.package) was tried again"))
                    report.stillFailed.append(manifest.package)
                } else if current.manifest == manifest, retrying {
                    retired.append((current, "package \(manifest.package) was tried again"))
                    report.retried.append(manifest.package)
                } else if current.manifest == manifest {
                    retired.append((current, "package \(manifest.package)'s library was replaced and it was restarted"))
                    report.libraryReplaced.append(manifest.package)
                } else {
                    retired.append((current, "package \(manifest.package) changed and was restarted"))
                    report.changed.append(manifest.package)
                }
            }
            // A manifest that no longer passes leaves the package that came from that file as
            // it was.
            for problem in directory.problems {
                guard let url = problem.url,
                    let current = old.packages.first(where: {
                        $0.manifest.file.standardizedFileURL == url.standardizedFileURL
                    }),
                    !seen.contains(current.manifest.package)
                else { continue }
                seen.insert(current.manifest.package)
                next.append(current)
                report.keptRunning.append((current.manifest.package, "\(problem)"))
            }
            for current in old.packages where !seen.contains(current.manifest.package) {
                retired.append((current, "package \(current.manifest.package) was removed"))
                report.removed.append(current.manifest.package)
            }
            // Every package started above has been taken; one that was not would be left running.
            for (name, unused) in started where unused.backend != nil {
                logger.error("package \(name) was started by a reload that did not use it; stopping it")
                retired.append((unused, "package \(name) was started by a reload that did not use it"))
            }
            next.sort { $0.manifest.file.lastPathComponent < $1.manifest.file.lastPathComponent }
            registry.withLock { $0 = PackageRegistry(next) }
            for (package, reason) in retired {
                guard let backend = package.backend else { continue }
                closeChannels(of: backend, status: .canceled, requestStatus: .appUnavailable, reason: reason)
                if !backend.shutDown(within: .seconds(5)) {
                    logger.warning(
                        "package \(package.manifest.package) is still busy in a callback after 5 seconds; left to finish"
                    )
                }
            }
            if !retired.isEmpty || discarded { backendLetGo() }
            return report
        }
    }

    /// The packages for `manifests`, in order: each backend started, or why it could not be.
    /// Worker processes start together and are waited for together.
    func makePackages(_ manifests: [Manifest], libraryQueues: inout [String: DispatchQueue]) -> [LoadedPackage] {
        var packages: [LoadedPackage] = []
        var pending: [(index: Int, start: WorkerProcess.PendingStart)] = []
        for manifest in manifests {
            if manifest.isolation == .process, manifest.functions.isEmpty, let library = manifest.library {
                do {
                    let worker = try makeWorker(manifest, library: library)
                    pending.append((packages.count, try worker.begin()))
                    packages.append(
                        LoadedPackage(manifest: manifest, loadError: nil, libraryPath: worker.library, backend: worker))
                } catch {
                    packages.append(notAvailable(manifest, error))
                }
                continue
            }
            packages.append(makePackage(manifest, libraryQueues: &libraryQueues))
        }
        for (index, start) in pending {
            do {
                try start.finish()
            } catch {
                packages[index] = notAvailable(packages[index].manifest, error)
            }
        }
        return packages
    }

    private func notAvailable(_ manifest: Manifest, _ error: PluginLoadError) -> LoadedPackage {
        logger.error(
            "package not available: \(error.reason)",
            metadata: ["package": "\(manifest.package)", "manifest": "\(manifest.file.lastPathComponent)"]
        )
        return LoadedPackage(manifest: manifest, loadError: error.reason, libraryPath: nil, backend: nil)
    }

    /// The package for one manifest: its backend started, or why it could not be.
    func makePackage(_ manifest: Manifest, libraryQueues: inout [String: DispatchQueue]) -> LoadedPackage {
        guard let library = manifest.library else {
            return LoadedPackage(manifest: manifest, loadError: nil, libraryPath: nil, backend: nil)
        }
        // A library loaded into the host before and replaced since runs its old code: said
        // with the package's failure, or as a warning when it loads.
        var replaced: URL?
        do {
            let folder = manifest.file.deletingLastPathComponent()
            if !manifest.functions.isEmpty {
                let (path, handle, wasReplaced) = try PluginLibrary.openHandle(
                    library, manifestFolder: folder, searchPath: configuration.pluginSearchPath, loaderSearch: true,
                    strictModes: configuration.strictModes
                )
                if wasReplaced { replaced = path }
                let functions = try DeclaredFunctions(manifest.functions, handle: handle)
                var shared: DispatchQueue? = nil
                if !manifest.concurrent {
                    shared =
                        libraryQueues[path.path] ?? DispatchQueue(label: "atrium.functions.\(path.lastPathComponent)")
                    libraryQueues[path.path] = shared
                }
                let queues = BackendQueues(package: manifest.package, concurrent: manifest.concurrent, sharing: shared)
                let backend = FunctionBackend(
                    package: manifest.package, functions: functions, queues: queues, host: self)
                warnIfReplaced(replaced, manifest)
                return LoadedPackage(
                    manifest: manifest, loadError: nil, libraryPath: path, backend: backend,
                    libraryFile: PluginLibrary.loadedFile(path))
            }
            if manifest.isolation == .process {
                let worker = try makeWorker(manifest, library: library)
                try worker.start()
                return LoadedPackage(manifest: manifest, loadError: nil, libraryPath: worker.library, backend: worker)
            }
            // A failure inside `open` says itself that the library was replaced.
            let (path, descriptor, wasReplaced) = try PluginLibrary.open(
                library, manifestFolder: folder, searchPath: configuration.pluginSearchPath,
                strictModes: configuration.strictModes
            )
            if wasReplaced { replaced = path }
            let plugin = InProcessPlugin(
                package: manifest.package, config: manifest.configJSON, concurrent: manifest.concurrent,
                descriptor: descriptor, host: self, logger: logger)
            try plugin.create()
            warnIfReplaced(replaced, manifest)
            return LoadedPackage(
                manifest: manifest, loadError: nil, libraryPath: path, backend: plugin,
                libraryFile: PluginLibrary.loadedFile(path))
        } catch {
            guard let replaced else { return notAvailable(manifest, error) }
            let note = PluginLibrary.replacedNote(replaced, plugin: manifest.functions.isEmpty)
            return notAvailable(manifest, PluginLoadError(reason: "\(error.reason); \(note)"))
        }
    }

    private func warnIfReplaced(_ library: URL?, _ manifest: Manifest) {
        guard let library else { return }
        logger.warning(
            "\(PluginLibrary.replacedNote(library, plugin: manifest.functions.isEmpty))",
            metadata: ["package": "\(manifest.package)"])
    }

    /// Finds and checks a package's library (without loading it into the host), for the
    /// worker process that will load it.
    private func makeWorker(_ manifest: Manifest, library: String) throws(PluginLoadError) -> WorkerProcess {
        let folder = manifest.file.deletingLastPathComponent()
        guard let executable = configuration.workerExecutable else {
            throw PluginLoadError(
                reason: "\"isolation\": \"process\" needs atriumd to start worker processes; this host cannot")
        }
        let (path, byLoader) = try PluginLibrary.find(
            library, manifestFolder: folder, searchPath: configuration.pluginSearchPath, loaderSearch: false)
        if configuration.strictModes, !byLoader,
            let problem = FileTrust.problem(file: path.path, what: "plugin library")
        {
            throw PluginLoadError(reason: problem)
        }
        if manifest.workerUser == nil || manifest.workerUser == Self.hostUserName {
            logger.notice(
                "package \(manifest.package) runs in a worker process as atriumd's own user: that keeps the host and the other packages running when it crashes, but is no boundary against hostile code, which can act as the host's user (its local socket, its files, the other workers); a \"user\" of its own in the manifest, with atriumd running as root, makes it one (SECURITY.md, Plugins)",
                metadata: ["package": "\(manifest.package)"])
        }
        return WorkerProcess(
            manifest: manifest, library: path, executable: executable, core: self,
            group: group, logger: logger)
    }

    /// The name of the user atriumd runs as, if it has one.
    static let hostUserName: String? = getpwuid(geteuid()).map { String(cString: $0.pointee.pw_name) }

    /// A backend is gone (its worker process died): its channels are closed with status
    /// Unknown, and the requests waiting on them answered AppUnavailable (6) with `reason`.
    func backendFailed(_ backend: any ServiceBackend, reason: String) {
        closeChannels(of: backend, status: .unknown, requestStatus: .appUnavailable, reason: reason)
    }

    /// Closes every channel of `backend`, each on its connection's loop: clients get
    /// `closed` with `status`, requests waiting on them `requestStatus` with `reason`; the
    /// backend is told only when `status` is canceled (a backend that failed hears nothing).
    /// Waits until every connection has done it, unless called on an event loop (a failed
    /// worker's link): a reload then destroys the retired backend only after it heard of
    /// every channel.
    func closeChannels(
        of backend: any ServiceBackend, status: AppServiceClosedStatus, requestStatus: AppServiceResponseStatus,
        reason: String
    ) {
        var done: [EventLoopFuture<Void>] = []
        for link in openConnections {
            let promise = link.eventLoop.makePromise(of: Void.self)
            link.run { connection in
                connection.channels.closeChannels(
                    of: backend, status: status, requestStatus: requestStatus, reason: reason, on: connection)
                promise.succeed()
            }
            done.append(promise.futureResult)
        }
        guard MultiThreadedEventLoopGroup.currentEventLoop == nil else { return }
        for future in done { try? future.wait() }
    }

    func package(_ name: String) -> LoadedPackage? {
        registry.withLock { $0.package(name) }
    }

    /// The `apps` listing: every package, its services (to a remote client, those that take
    /// remote callers), its schemes and its state; why it is not ready only to a local client
    /// (a remote one is not told about the host's files). With `package`, that package alone, with what its services take: those
    /// `caller` may open (a service's access, a token's scope), at most
    /// ``maxDescribedBytes`` of them.
    func apps(for caller: Caller, package name: String? = nil) -> [AppInfo] {
        let isLocal = !caller.isRemote
        return packages.compactMap { package in
            if let name, package.manifest.package != name { return nil }
            let health = package.backend?.health
            // A package of launches only (a program, no library) is ready without a backend.
            let launchesOnly = package.backend == nil && package.loadError == nil && package.manifest.launch != nil
            let state = health?.state ?? (launchesOnly ? .ready : .failed)
            let reason = state == .ready ? nil : health?.reason ?? package.loadError
            var described: [String] = []
            if let name {
                var budget = Self.maxDescribedBytes
                for service in package.manifest.services {
                    guard case .success = route(package: name, service: service.name, caller: caller),
                        let interface = package.manifest.describedInterface(of: service)
                    else { continue }
                    // A package of many services and functions would repeat them in each.
                    budget -= interface.encodedSizeBound + service.name.utf8.count
                    guard budget >= 0 else { break }
                    described.append(service.name)
                }
            }
            return AppInfo(
                package: package.manifest.package,
                displayName: package.manifest.displayName,
                // A local client may open every service; a remote one, those that take remote callers.
                services: package.manifest.services.filter { isLocal || $0.supportsRemoteSystems }.map(\.name),
                schemes: package.manifest.schemes,
                state: state.rawValue,
                reason: isLocal ? reason : nil,
                encodedInterfaces: described.isEmpty ? nil : package.interfaces.encoded(described, of: package.manifest)
            )
        }
    }

    /// The most of services' interfaces one `apps` answer carries (the services past it are
    /// left undescribed): far below a frame's limit.
    static let maxDescribedBytes = 1 << 20
}
