import Dispatch
import Foundation
import Logging

/// Starts a package's backend from its manifest: declared functions, a plugin loaded into
/// the host, or a worker process; or says why it could not. Used by ``PackageRegistry``
/// under its reload lock.
struct PackageLoader {
    let core: HostCore
    var logger: Logger { core.logger }

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
                    library, manifestFolder: folder, searchPath: core.configuration.pluginSearchPath,
                    loaderSearch: true,
                    strictModes: core.configuration.strictModes
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
                    package: manifest.package, functions: functions, queues: queues, host: core)
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
                library, manifestFolder: folder, searchPath: core.configuration.pluginSearchPath,
                strictModes: core.configuration.strictModes
            )
            if wasReplaced { replaced = path }
            let plugin = InProcessPlugin(
                package: manifest.package, config: manifest.configJSON, concurrent: manifest.concurrent,
                descriptor: descriptor, host: core, logger: logger)
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
        guard let executable = core.configuration.workerExecutable else {
            throw PluginLoadError(
                reason: "\"isolation\": \"process\" needs atriumd to start worker processes; this host cannot")
        }
        let (path, byLoader) = try PluginLibrary.find(
            library, manifestFolder: folder, searchPath: core.configuration.pluginSearchPath, loaderSearch: false)
        if core.configuration.strictModes, !byLoader,
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
            manifest: manifest, library: path, executable: executable, core: core,
            group: core.group, logger: logger)
    }

    /// The name of the user atriumd runs as, if it has one.
    static let hostUserName: String? = getpwuid(geteuid()).map { String(cString: $0.pointee.pw_name) }
}
