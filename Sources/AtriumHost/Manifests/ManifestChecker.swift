import AtriumProtocol
import AtriumValues
public import Foundation

/// What checking one manifest found: the manifest, when nothing was wrong with it, and
/// every error and warning, each with its field and line.
public struct ManifestReport: Sendable {
    /// The package, when the manifest has no errors (warnings do not stop it).
    public var manifest: Manifest?
    /// Everything wrong with it, in the order of the manifest's fields (at most
    /// ``Manifest/maxReported``, the last saying how many more there were).
    public var errors: [ManifestError]
    /// Keys this host does not know, at every level, with the known key each is closest to.
    public var warnings: [ManifestError]
    /// The line of the `package` key, for what is found wrong with the package later (a
    /// package another manifest declares too).
    var packageLine: Int?
}

extension Manifest {
    /// How many errors, and how many warnings, one manifest's report holds at most.
    public static let maxReported = 50

    /// Parses and validates one manifest. `file` is used for `file` and in errors.
    ///
    /// - Throws: the first ``ManifestError`` (``check(json:file:)`` reports them all).
    public init(json data: Data, file: URL) throws(ManifestError) {
        let report = Self.check(json: data, file: file)
        guard let manifest = report.manifest else {
            throw report.errors.first ?? ManifestError(file: file.lastPathComponent, field: nil, reason: "is refused")
        }
        self = manifest
    }

    /// Checks one manifest all the way through: one wrong field does not hide the next, an
    /// error in one service does not hide one in another, and keys this host does not know
    /// are reported at every level with a "did you mean" when a known key is close.
    public static func check(json data: Data, file: URL) -> ManifestReport {
        let checker = ManifestChecker(file: file.lastPathComponent)
        let manifest = checker.read(data, file: file)
        return ManifestReport(
            manifest: checker.errors.isEmpty ? manifest : nil,
            errors: checker.reported(checker.errors, more: checker.moreErrors),
            warnings: checker.reported(checker.warnings, more: checker.moreWarnings),
            packageLine: checker.lines["package"])
    }
}

/// Reads a manifest section by section. A section that is wrong records its error and
/// the reading goes on with the next; what depends on a wrong section is not checked, so one
/// mistake is reported once, not again in everything that follows from it.
final class ManifestChecker {
    let name: String
    private(set) var lines: [String: Int] = [:]
    private(set) var errors: [ManifestError] = []
    private(set) var warnings: [ManifestError] = []
    /// Problems found past ``Manifest/maxReported``: counted, not kept (a crafted manifest
    /// may hold hundreds of thousands).
    private(set) var moreErrors = 0
    private(set) var moreWarnings = 0

    init(file name: String) { self.name = name }

    /// An error at `field`, with the line the field is on (or, for a field that is not in
    /// the file, such as a missing key, the line of what holds it).
    func fail(_ field: String?, _ reason: String) -> ManifestError {
        ManifestError(file: name, field: field, reason: reason, line: field.flatMap(line(of:)))
    }

    func line(of field: String) -> Int? {
        var path = Substring(field)
        while !path.isEmpty {
            if let line = lines[String(path)] { return line }
            guard let cut = path.lastIndex(where: { $0 == "." || $0 == "[" }) else { return nil }
            path = path[..<cut]
        }
        return nil
    }

    /// Runs one section; its error, if any, is recorded and the section's result is nil.
    @discardableResult
    func section<T>(_ body: () throws(ManifestError) -> T) -> T? {
        do {
            return try body()
        } catch {
            record(error)
            return nil
        }
    }

    /// Reads each element of `list` on its own section: every wrong one is reported, and the
    /// result is nil when any was wrong.
    func readEach<T>(_ list: [JSONValue], _ read: (Int, JSONValue) throws(ManifestError) -> T) -> [T]? {
        var results: [T] = []
        var allRead = true
        for (index, item) in list.enumerated() {
            if let result = section({ () throws(ManifestError) -> T in try read(index, item) }) {
                results.append(result)
            } else {
                allRead = false
            }
        }
        return allRead ? results : nil
    }

    func record(_ error: ManifestError) {
        if errors.count < Manifest.maxReported { errors.append(error) } else { moreErrors += 1 }
    }

    /// Warns of each key of `object` that is not in `known`, with the closest known one.
    func warnUnknownKeys(_ object: [String: JSONValue], at path: String, known: [String]) {
        for key in object.keys.sorted() where !known.contains(key) {
            guard warnings.count < Manifest.maxReported else {
                moreWarnings += 1
                continue
            }
            let field = path + StrictJSON.step(key, first: path.isEmpty)
            warnings.append(
                fail(field, "is not a key this host knows, and is ignored\(Suggestion.didYouMean(key, among: known))"))
        }
    }

    /// `found` in the order of the file's lines (those without a line last, as found), at most
    /// ``Manifest/maxReported``, the last saying how many more there were.
    func reported(_ found: [ManifestError], more: Int) -> [ManifestError] {
        let list = found.enumerated().sorted {
            ($0.element.line ?? Int.max, $0.offset) < ($1.element.line ?? Int.max, $1.offset)
        }.map(\.element)
        guard list.count + more > Manifest.maxReported else { return list }
        let kept = Manifest.maxReported - 1
        return Array(list.prefix(kept)) + [fail(nil, "and \(list.count - kept + more) more like the above")]
    }

    static let knownKeys = [
        "manifestVersion", "package", "displayName", "library", "services", "schemes", "config", "concurrent",
        "launch", "functions", "isolation", "limits", "user",
    ]
    static let serviceKeys = ["name", "supportsRemoteSystems", "access", "commands", "commandKey"]
    static let commandKeys = ["command", "description", "fields", "additionalFields"]
    static let fieldKeys = ["name", "type", "of", "optional", "description"]
    static let launchKeys = ["exec", "wait", "timeoutSeconds"]
    static let functionKeys = ["command", "symbol", "params", "returns"]
    static let parameterKeys = ["name", "type", "lengthOf"]

    func read(_ data: Data, file: URL) -> Manifest? {
        // Strict JSON (RFC 8259): a trailing comma, a comment or a key given twice is refused
        // with its line, not read one way or another. Nothing else can be checked without it.
        guard data.count <= Manifest.maxBytes else {
            record(fail(nil, "is \(data.count) bytes; a manifest may be at most \(Manifest.maxBytes) (1 MiB)"))
            return nil
        }
        let root: [String: JSONValue]
        do {
            let json = try StrictJSON([UInt8](data))
            guard case .object(let object) = json.value else {
                record(fail(nil, "must hold a JSON object"))
                return nil
            }
            root = object
            lines = json.lines
        } catch {
            record(
                ManifestError(
                    file: name, field: nil, reason: "is not valid JSON: column \(error.column): \(error.reason)",
                    line: error.line))
            return nil
        }
        warnUnknownKeys(root, at: "", known: Self.knownKeys)

        section { () throws(ManifestError) in
            guard let version = root["manifestVersion"] else { throw fail("manifestVersion", "is missing") }
            guard case .number(1) = version else { throw fail("manifestVersion", "must be 1, not \(version)") }
        }
        let packageName = section { () throws(ManifestError) -> String in
            guard let package = root["package"] else { throw fail("package", "is missing") }
            guard case .string(let text) = package else { throw fail("package", "must be a string, not \(package)") }
            if let problem = Manifest.identifierProblem(text) { throw fail("package", problem) }
            return text
        }
        let displayName = section { () throws(ManifestError) -> String? in
            guard let value = root["displayName"] else { return nil }
            guard case .string(let text) = value, !text.isEmpty else {
                throw fail("displayName", "must be a non-empty string")
            }
            return text
        }
        let library = section { () throws(ManifestError) -> String? in
            guard let value = root["library"] else { return nil }
            guard case .string(let text) = value, !text.isEmpty else {
                throw fail("library", "must be a non-empty string (a path to the plugin's shared library)")
            }
            return text
        }
        // What follows from the library is checked only when the library was read or absent.
        let hasLibrary: Bool? = library.map { $0 != nil }
        let services = readServices(root["services"], hasFunctions: root["functions"] != nil)
        let schemes = readSchemes(root["schemes"])
        let functions = readFunctions(root["functions"], hasLibrary: hasLibrary)

        // As written, whether or not each entry was right: a wrong service is still a service.
        func isNonEmptyArray(_ value: JSONValue?) -> Bool {
            if case .array(let list)? = value { return !list.isEmpty }
            return false
        }
        if hasLibrary == false, isNonEmptyArray(root["services"]) {
            record(fail("library", "is missing: a package with services needs a plugin library"))
        }
        // A library with nothing to serve is a manifest that lost its services (a key
        // misspelled, say): it would load a plugin no one can reach.
        if hasLibrary == true, services?.isEmpty == true, schemes?.isEmpty == true, root["functions"] == nil {
            record(
                fail(
                    "services",
                    "is missing: the package has a library but declares nothing for it to serve (services, schemes or functions)"
                ))
        }

        let configJSON = section { () throws(ManifestError) -> String in
            guard let value = root["config"] else { return "{}" }
            guard case .object = value else { throw fail("config", "must be a JSON object, not \(value)") }
            let object = (try? JSONSerialization.jsonObject(with: data) as? [String: Any])?["config"] ?? [:]
            let encoded =
                (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
            return String(decoding: encoded, as: UTF8.self)
        }
        let concurrent = section { () throws(ManifestError) -> Bool in
            guard let value = root["concurrent"] else { return false }
            guard case .bool(let flag) = value else { throw fail("concurrent", "must be true or false, not \(value)") }
            return flag
        }
        let launch = readLaunch(root["launch"], hasLibrary: hasLibrary, schemes: schemes)
        let isolation = section { () throws(ManifestError) -> Manifest.Isolation in
            guard let value = root["isolation"] else { return .inProcess }
            let names = Manifest.Isolation.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: " or ")
            guard case .string(let text) = value, let chosen = Manifest.Isolation(rawValue: text) else {
                throw fail("isolation", "must be \(names), not \(value)")
            }
            if chosen == .process, hasLibrary == false || root["functions"] != nil {
                throw fail("isolation", "\"process\" is for packages with a plugin library (not declared functions)")
            }
            return chosen
        }
        let workerLimits = readLimits(root["limits"], isolation: isolation)
        let workerUser = section { () throws(ManifestError) -> String? in
            guard let value = root["user"] else { return nil }
            if isolation == .inProcess {
                throw fail("user", "is the user a worker process runs as: it needs \"isolation\": \"process\"")
            }
            guard case .string(let name) = value, !name.isEmpty, name.count <= 32,
                name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "_-.".contains($0)) })
            else {
                throw fail("user", "must be a user name (letters, digits, _ - and ., at most 32), not \(value)")
            }
            return name
        }

        guard errors.isEmpty, let packageName, let displayName, let library, let services, let schemes,
            let configJSON, let concurrent, let launch, let functions, let isolation, let workerLimits, let workerUser
        else { return nil }
        var manifest = Manifest(
            manifestVersion: 1, package: packageName, displayName: displayName ?? packageName, library: library,
            services: services, schemes: schemes, configJSON: configJSON, concurrent: concurrent, launch: launch,
            functions: functions, file: file
        )
        manifest.isolation = isolation
        manifest.workerUser = workerUser
        manifest.workerLimits = workerLimits
        return manifest
    }

    /// `limits`: each limit checked on its own.
    func readLimits(_ value: JSONValue?, isolation: Manifest.Isolation?) -> Manifest.WorkerLimits? {
        guard let value else { return Manifest.WorkerLimits() }
        if isolation == .inProcess {
            record(fail("limits", "apply to a worker process: they need \"isolation\": \"process\""))
            return nil
        }
        guard case .object(let entries) = value else {
            record(
                fail("limits", "must be an object like {\"memoryMB\": 256, \"openFiles\": 64, \"cpuSeconds\": 3600}"))
            return nil
        }
        var limits = Manifest.WorkerLimits()
        let before = errors.count + moreErrors
        for key in entries.keys.sorted() {
            section { () throws(ManifestError) in
                let known = ["memoryMB", "openFiles", "cpuSeconds"]
                guard known.contains(key) else {
                    throw fail(
                        "limits" + StrictJSON.step(key, first: false),
                        "is not a limit; the limits are memoryMB, openFiles and cpuSeconds\(Suggestion.didYouMean(key, among: known))"
                    )
                }
                guard case .number(let number)? = entries[key], number >= 1, number <= 1_000_000,
                    number == number.rounded()
                else {
                    throw fail("limits.\(key)", "must be a whole number from 1 to 1000000")
                }
                switch key {
                case "memoryMB":
                    if number < 64 {
                        throw fail(
                            "limits.memoryMB", "must be at least 64: a worker needs that much address space to start")
                    }
                    limits.memoryMB = Int(number)
                case "openFiles":
                    if number < 16 {
                        throw fail("limits.openFiles", "must be at least 16: a worker needs that many to start")
                    }
                    limits.openFiles = Int(number)
                default:
                    limits.cpuSeconds = Int(number)
                }
            }
        }
        return errors.count + moreErrors == before ? limits : nil
    }
}
