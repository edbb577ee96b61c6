import Dispatch
import Foundation
import Logging
import Synchronization

/// The host's packages: the snapshot every open and launch reads (``PackageSnapshot``, swapped
/// whole by a reload, so that a reader never sees half of one), and the loading and reloading
/// that make the next snapshot from the manifests (one at a time; ``PackageLoader`` starts
/// each package's backend). Thread-safe.
final class PackageRegistry: Sendable {
    /// The packages, swapped whole by ``reload(_:core:)``: readers take the snapshot of the moment.
    private let snapshot = Mutex(PackageSnapshot())
    /// Reloads one at a time, and the queues of declared functions' libraries they share.
    private let reloading = Mutex<[String: DispatchQueue]>([:])

    /// The packages now.
    var packages: [LoadedPackage] { snapshot.withLock { $0.packages } }

    func package(_ name: String) -> LoadedPackage? {
        snapshot.withLock { $0.package(name) }
    }

    /// Whether `backend` is still its package's (a reload has not retired it). A channel a
    /// backend accepts is recorded only if it is, on the connection's loop; a reload closes
    /// a retired backend's channels on each connection's loop after it swapped the
    /// packages, so no channel of a retired backend outlives the reload.
    func isCurrent(_ backend: any ServiceBackend) -> Bool {
        snapshot.withLock { $0.package(backend.package)?.backend === backend }
    }

    /// The packages, once any reload under way has finished: shutdown stops them, and no
    /// reload starts after it (a reload looks at ``HostCore/isShuttingDown`` under the same lock).
    func packagesAfterReloads() -> [LoadedPackage] {
        reloading.withLock { _ in packages }
    }

    /// Loads the packages of `directory`'s manifests, in order. A plugin that fails to load is
    /// recorded with its reason; the others load regardless. Call once, before serving.
    func load(_ directory: ManifestDirectory, core: HostCore) {
        let loader = PackageLoader(core: core)
        let loaded = reloading.withLock { queues in loader.makePackages(directory.manifests, libraryQueues: &queues) }
        snapshot.withLock { $0 = PackageSnapshot(loaded) }
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
    func reload(_ directory: ManifestDirectory, core: HostCore) -> ReloadReport? {
        let loader = PackageLoader(core: core)
        let logger = core.logger
        return reloading.withLock { queues -> ReloadReport? in
            // Shutdown stops the packages under this same lock: a reload never races it.
            guard !core.isShuttingDown else { return nil }
            var report = ReloadReport()
            let old = snapshot.withLock { $0 }
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
                zip(starting.map(\.package), loader.makePackages(starting, libraryQueues: &queues))
            ) { first, _ in first }
            for manifest in directory.manifests {
                seen.insert(manifest.package)
                guard let current = old.package(manifest.package) else {
                    next.append(
                        started.removeValue(forKey: manifest.package)
                            ?? loader.makePackage(manifest, libraryQueues: &queues))
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
                    started.removeValue(forKey: manifest.package)
                    ?? loader.makePackage(manifest, libraryQueues: &queues)
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
            snapshot.withLock { $0 = PackageSnapshot(next) }
            for (package, reason) in retired {
                guard let backend = package.backend else { continue }
                core.closeChannels(of: backend, status: .canceled, requestStatus: .appUnavailable, reason: reason)
                if !backend.shutDown(within: .seconds(5)) {
                    logger.warning(
                        "package \(package.manifest.package) is still busy in a callback after 5 seconds; left to finish"
                    )
                }
            }
            if !retired.isEmpty || discarded { core.backendLetGo() }
            return report
        }
    }
}
