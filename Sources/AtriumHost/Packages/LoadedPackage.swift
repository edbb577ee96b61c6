import AtriumProtocol
public import Foundation
import Synchronization

/// A package as the host knows it: its manifest, and what serves it or why nothing does.
public struct LoadedPackage: Sendable {
    public var manifest: Manifest
    /// Why the package's backend is not running, when it is not; the package then answers
    /// `open` with status 2 (AppUnavailable).
    public var loadError: String?
    /// Where the library was found.
    public var libraryPath: URL?
    let backend: (any ServiceBackend)?
    /// The library file an in-process backend runs, when that is known (a worker knows its
    /// own: the file at the library's path when its latest process began).
    var libraryFile: PluginLibrary.FileIdentity? = nil

    /// Whether the package cannot serve until it is loaded again: its library did not load,
    /// or its worker process crashed until it was given up. (A package of launches only has
    /// neither a backend nor an error, and serves.)
    var hasFailed: Bool {
        loadError != nil || backend?.health.state == .failed
    }

    /// Whether a file at the library's path is not the one the backend runs: one installed
    /// anew since it loaded. (No file there now is no new library to load.)
    var libraryReplaced: Bool {
        guard let libraryPath, let now = PluginLibrary.FileIdentity(libraryPath.path) else { return false }
        if let worker = backend as? WorkerProcess {
            // A worker that began while no file was there loaded one that came later, or none.
            return worker.libraryFile != now
        }
        guard let libraryFile else { return false }
        return libraryFile != now
    }

    /// Whether the backend is a worker process, which a restart loads the library into anew.
    var isWorker: Bool { backend is WorkerProcess }

    /// Its services' interfaces as `apps` sends them, encoded once for this version of the
    /// package.
    let interfaces = DescribedInterfaces()
}

/// A package's services' interfaces, encoded for `apps` answers: once per set of services
/// described (which services a caller is told of depends on what it may open), not once per
/// answer. A package of many commands makes an answer of close to a MiB, which a client could
/// otherwise ask the host to build again and again. Thread-safe.
final class DescribedInterfaces: Sendable {
    private let encodings = Mutex<[[String]: EncodedInterfaces]>([:])
    /// The most sets of services kept: each caller's access picks one, and there are few kinds.
    static let maxKept = 8

    /// The interfaces of `services` (each of which describes itself in `manifest`), in order.
    func encoded(_ services: [String], of manifest: Manifest) -> EncodedInterfaces {
        if let kept = encodings.withLock({ $0[services] }) { return kept }
        let byName = Dictionary(manifest.services.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        let encoded = EncodedInterfaces(
            services.sorted().compactMap { name in
                byName[name].flatMap { manifest.describedInterface(of: $0) }.map { (name, $0) }
            })
        encodings.withLock { encodings in
            if encodings.count >= Self.maxKept { encodings.removeAll() }
            encodings[services] = encoded
        }
        return encoded
    }
}

/// The packages at one moment: an immutable snapshot, swapped whole on reload, so that a
/// reader never sees half of a reload.
struct PackageSnapshot: Sendable {
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
