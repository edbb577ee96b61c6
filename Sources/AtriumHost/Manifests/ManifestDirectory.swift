public import Foundation

/// The manifests of a folder: those that loaded, in file-name order, and why the others did
/// not. A bad manifest never stops the others from loading.
public struct ManifestDirectory: Sendable {
    public var folder: URL
    public var manifests: [Manifest]
    /// Manifests that were refused, each with its reason.
    public var problems: [ManifestError]
    /// Things worth saying that did not stop a manifest from loading (unknown keys).
    public var warnings: [String]

    /// Reads every `*.json` file in `folder`. With `strictModes`, the folder and each manifest
    /// must be safe from other users (``FileTrust``): an unsafe manifest is refused with the
    /// reason, an unsafe folder refuses them all.
    ///
    /// - Throws: ``ManifestError`` only when the folder itself cannot be read, or is unsafe.
    public static func load(_ folder: URL, strictModes: Bool = true) throws(ManifestError) -> ManifestDirectory {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        } catch {
            throw ManifestError(
                file: folder.path, field: nil, reason: "cannot read the manifests folder: \(error.localizedDescription)"
            )
        }
        if strictModes, let problem = FileTrust.problem(folder.path, what: "manifests folder") {
            throw ManifestError(file: folder.path, field: nil, reason: problem)
        }
        var result = ManifestDirectory(folder: folder, manifests: [], problems: [], warnings: [])
        for name in names.filter({ $0.hasSuffix(".json") }).sorted() {
            let file = folder.appendingPathComponent(name)
            if strictModes, let problem = FileTrust.problem(file.path, what: "manifest") {
                result.problems.append(ManifestError(file: name, field: nil, reason: problem))
                continue
            }
            guard let data = FileManager.default.contents(atPath: file.path) else {
                result.problems.append(ManifestError(file: name, field: nil, reason: "cannot be read"))
                continue
            }
            do {
                let manifest = try Manifest(json: data, file: file)
                if let first = result.manifests.first(where: { $0.package == manifest.package }) {
                    result.problems.append(
                        ManifestError(
                            file: name,
                            field: "package",
                            reason: "\"\(manifest.package)\" is already declared by \(first.file.lastPathComponent)"
                        )
                    )
                    continue
                }
                for key in manifest.unknownKeys {
                    result.warnings.append("\(name): unknown key \"\(key)\" ignored")
                }
                result.manifests.append(manifest)
            } catch {
                result.problems.append(error)
            }
        }
        return result
    }
}
