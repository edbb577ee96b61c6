public import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The manifests of one or more folders: those that loaded, in folder then file-name order,
/// and why the others did not. A bad manifest never stops the others from loading.
///
/// With several folders (the standard ones, or `--manifests` given more than once), a file
/// of the same name in an earlier folder takes the place of a later one (as systemd's
/// `/etc` over `/usr/lib`: copy a manifest to `/etc/atrium/manifests.d` to change it), which
/// is said in ``notes``; a package declared by two files of different names is a clash:
/// the first one found is used, the other refused with the reason.
public struct ManifestDirectory: Sendable {
    /// The folders that were read (with `skipMissing`, those that exist).
    public var folders: [URL]
    public var manifests: [Manifest]
    /// Manifests that were refused, each with its reason.
    public var problems: [ManifestError]
    /// Things worth saying that do not stop a manifest from loading (keys this host does not
    /// know, at any level), for the manifests refused too: a misspelled key is often why.
    public var warnings: [ManifestError]
    /// What was decided without being wrong: a manifest that takes the place of another.
    public var notes: [String] = []

    /// Reads every `*.json` file in `folder`. With `strictModes`, the folder and each manifest
    /// must be safe from other users (``FileTrust``): an unsafe manifest is refused with the
    /// reason, an unsafe folder refuses them all.
    ///
    /// - Throws: ``ManifestError`` only when the folder itself cannot be read, or is unsafe.
    public static func load(_ folder: URL, strictModes: Bool = true) throws(ManifestError) -> ManifestDirectory {
        try load([folder], strictModes: strictModes)
    }

    /// Reads every `*.json` file in each of `folders`, in order. With `skipMissing`, a folder
    /// that does not exist is passed over (the standard folders: not every machine has each);
    /// without it, it is an error. Files are named by their path when there are several
    /// folders, by their name when there is one.
    ///
    /// - Throws: ``ManifestError`` when a folder cannot be read (or is missing, without
    ///   `skipMissing`), or is unsafe.
    public static func load(_ folders: [URL], skipMissing: Bool = false, strictModes: Bool = true) throws(ManifestError)
        -> ManifestDirectory
    {
        var result = ManifestDirectory(folders: [], manifests: [], problems: [], warnings: [])
        let several = folders.count > 1
        // Which file took each file name, for a later folder's file of the same name.
        var fileForName: [String: URL] = [:]
        for folder in folders {
            var isFolder: ObjCBool = false
            if skipMissing, !FileManager.default.fileExists(atPath: folder.path, isDirectory: &isFolder) { continue }
            let names: [String]
            do {
                names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
            } catch {
                throw ManifestError(
                    file: folder.path, field: nil,
                    reason:
                        "cannot read the manifests folder: \(Self.whyUnlistable(folder.path) ?? error.localizedDescription)"
                )
            }
            if strictModes, let problem = FileTrust.problem(folder.path, what: "manifests folder") {
                throw ManifestError(file: folder.path, field: nil, reason: problem)
            }
            result.folders.append(folder)
            for name in names.filter({ $0.hasSuffix(".json") }).sorted() {
                let file = folder.appendingPathComponent(name)
                let label = several ? file.path : name
                if let earlier = fileForName[name] {
                    result.notes.append("\(file.path) is not read: \(earlier.path) takes its place")
                    continue
                }
                fileForName[name] = file
                result.read(file, label: label, several: several, strictModes: strictModes)
            }
        }
        return result
    }

    /// Why the system cannot list `path`, in its words ("No such file or directory", "Not a
    /// directory", "Permission denied", "Too many levels of symbolic links"), or nil when it
    /// can: Foundation's error says only "the operation could not be completed" for most.
    static func whyUnlistable(_ path: String) -> String? {
        guard let directory = opendir(path) else { return String(cString: strerror(errno)) }
        closedir(directory)
        return nil
    }

    private mutating func read(_ file: URL, label: String, several: Bool, strictModes: Bool) {
        // The file, the folders on its way and, for a link, where it leads: someone who could
        // change any of them could put a manifest of theirs in place of this one.
        if strictModes, let problem = FileTrust.problem(file: file.path, what: "manifest") {
            problems.append(ManifestError(file: label, field: nil, reason: problem, url: file))
            return
        }
        // Its size before it is read: a link to a huge file is not read whole to be refused.
        var info = stat()
        if stat(file.path, &info) == 0, info.st_mode & S_IFMT == S_IFREG, Int(info.st_size) > Manifest.maxBytes {
            problems.append(
                ManifestError(
                    file: label, field: nil,
                    reason: "is \(info.st_size) bytes; a manifest may be at most \(Manifest.maxBytes) (1 MiB)",
                    url: file))
            return
        }
        guard let data = FileManager.default.contents(atPath: file.path) else {
            problems.append(ManifestError(file: label, field: nil, reason: "cannot be read", url: file))
            return
        }
        var report = Manifest.check(json: data, file: file)
        for index in report.errors.indices {
            report.errors[index].file = label
            report.errors[index].url = file
        }
        for index in report.warnings.indices { report.warnings[index].file = label }
        warnings += report.warnings
        guard let manifest = report.manifest else {
            problems += report.errors
            return
        }
        if let first = manifests.first(where: { $0.package == manifest.package }) {
            let firstLabel = several ? first.file.path : first.file.lastPathComponent
            problems.append(
                ManifestError(
                    file: label, field: "package",
                    reason: "\"\(manifest.package)\" is already declared by \(firstLabel)",
                    line: report.packageLine, url: file
                )
            )
            return
        }
        manifests.append(manifest)
    }
}
