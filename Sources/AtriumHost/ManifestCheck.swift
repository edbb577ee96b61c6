public import Foundation

/// What `atriumd --check` reports: each manifest, whether it would load, and why not.
public struct ManifestCheck: Sendable {
    public struct Entry: Sendable {
        public var file: String
        public var package: String?
        /// What would be served: services (with their remote flag) and schemes.
        public var summary: String
        /// Why it would not load or not be available (every reason found, each with its
        /// line when it has one); empty when all is well.
        public var problems: [String] = []
        /// What would not stop it loading: keys this host does not know, at any level.
        public var warnings: [String] = []

        /// The problems, as one text; nil when all is well.
        public var problem: String? { problems.isEmpty ? nil : problems.joined(separator: "; ") }
    }

    public var entries: [Entry]
    /// What was decided without being wrong (``ManifestDirectory/notes``).
    public var notes: [String] = []
    /// The folders read.
    public var folders: [URL] = []

    /// Whether everything would load.
    public var isClean: Bool { entries.allSatisfy { $0.problem == nil } }

    /// Validates every manifest of `folders` (``ManifestDirectory/load(_:skipMissing:strictModes:)``) and, with `load`, opens each plugin library to
    /// check its descriptor against the ABI, without starting the plugin. Opening a library
    /// runs its initialisers (that is what `dlopen` does), so `load: false` checks only the
    /// manifests and the files: that each library is found and, with `strictModes`, that no
    /// other user could have written it.
    ///
    /// - Throws: ``ManifestError`` when a folder cannot be read (or, with `strictModes`, is
    ///   writable by other users).
    public static func run(
        folders: [URL], skipMissing: Bool = false, pluginSearchPath: [URL], strictModes: Bool = true,
        load: Bool = true
    ) throws(ManifestError) -> ManifestCheck {
        let directory = try ManifestDirectory.load(folders, skipMissing: skipMissing, strictModes: strictModes)
        // A refused manifest is one entry, with each of its problems.
        var entries: [Entry] = []
        for problem in directory.problems {
            if entries.last?.file != problem.file { entries.append(Entry(file: problem.file, summary: "")) }
            entries[entries.count - 1].problems.append(Self.located(problem))
        }
        for manifest in directory.manifests {
            let services = manifest.services.map { $0.name + ($0.supportsRemoteSystems ? "" : " (local only)") }
            var parts: [String] = []
            if !services.isEmpty { parts.append("services: " + services.joined(separator: ", ")) }
            if !manifest.schemes.isEmpty { parts.append("schemes: " + manifest.schemes.joined(separator: ", ")) }
            var entry = Entry(
                file: folders.count > 1 ? manifest.file.path : manifest.file.lastPathComponent,
                package: manifest.package,
                summary: parts.joined(separator: "; ")
            )
            if let library = manifest.library, !load {
                do throws(PluginLoadError) {
                    let (path, byLoader) = try PluginLibrary.find(
                        library, manifestFolder: manifest.file.deletingLastPathComponent(),
                        searchPath: pluginSearchPath, loaderSearch: !manifest.functions.isEmpty)
                    if strictModes, !byLoader, let problem = FileTrust.problem(file: path.path, what: "plugin library")
                    {
                        throw PluginLoadError(reason: problem)
                    }
                    entry.summary += (entry.summary.isEmpty ? "" : "; ") + "library: \(path.path) (not loaded)"
                } catch {
                    entry.problems = [error.reason]
                }
            } else if let library = manifest.library, !manifest.functions.isEmpty {
                do {
                    let (path, handle, _) = try PluginLibrary.openHandle(
                        library, manifestFolder: manifest.file.deletingLastPathComponent(),
                        searchPath: pluginSearchPath,
                        loaderSearch: true, strictModes: strictModes
                    )
                    _ = try DeclaredFunctions(manifest.functions, handle: handle)
                    entry.summary += "; functions: " + manifest.functions.map(\.command).joined(separator: ", ")
                    entry.summary += "; library: \(path.path)"
                } catch {
                    entry.problems = [error.reason]
                }
            } else if let library = manifest.library {
                do {
                    let (path, descriptor, _) = try PluginLibrary.open(
                        library, manifestFolder: manifest.file.deletingLastPathComponent(),
                        searchPath: pluginSearchPath,
                        strictModes: strictModes
                    )
                    descriptor.deallocate()
                    entry.summary += (entry.summary.isEmpty ? "" : "; ") + "library: \(path.path)"
                } catch {
                    entry.problems = [error.reason]
                }
            }
            entries.append(entry)
        }
        for warning in directory.warnings {
            guard let index = entries.firstIndex(where: { $0.file == warning.file }) else { continue }
            entries[index].warnings.append(Self.located(warning))
        }
        entries.sort { $0.file < $1.file }
        return ManifestCheck(entries: entries, notes: directory.notes, folders: directory.folders)
    }

    /// A problem without its file (the entry names it): `line 7: services[0].name: is missing`.
    static func located(_ problem: ManifestError) -> String {
        (problem.line.map { "line \($0): " } ?? "") + problem.detail
    }
}
