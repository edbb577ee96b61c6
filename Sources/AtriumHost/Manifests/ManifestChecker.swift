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

    /// `services`: each entry checked on its own, so that every wrong one is reported.
    func readServices(_ value: JSONValue?, hasFunctions: Bool) -> [Manifest.Service]? {
        guard let value else { return [] }
        guard case .array(let list) = value else {
            record(fail("services", "must be an array"))
            return nil
        }
        var services: [Manifest.Service] = []
        var names: Set<String> = []
        var allRead = true
        for (index, item) in list.enumerated() {
            let field = "services[\(index)]"
            guard case .object(let entry) = item else {
                record(fail(field, "must be an object"))
                allRead = false
                continue
            }
            warnUnknownKeys(entry, at: field, known: Self.serviceKeys)
            // Its name and its access are checked apart: a wrong name does not hide a wrong access.
            let name = section { () throws(ManifestError) -> String in
                guard let nameValue = entry["name"] else { throw fail("\(field).name", "is missing") }
                guard case .string(let serviceName) = nameValue else { throw fail("\(field).name", "must be a string") }
                if let problem = Manifest.identifierProblem(serviceName) { throw fail("\(field).name", problem) }
                // Against every name given, so that a name is "declared twice" even when its
                // first service was wrong in some other way.
                if names.contains(serviceName) {
                    throw fail("\(field).name", "\"\(serviceName)\" is declared twice in this package")
                }
                names.insert(serviceName)
                return serviceName
            }
            let access = section { () throws(ManifestError) -> Manifest.Access in
                var remote: Bool?
                if let flag = entry["supportsRemoteSystems"] {
                    guard case .bool(let value) = flag else {
                        throw fail("\(field).supportsRemoteSystems", "must be true or false, not \(flag)")
                    }
                    remote = value
                }
                var access: Manifest.Access = remote == true ? .paired : .local
                if let value = entry["access"] {
                    access = try readAccess(value, field: "\(field).access")
                    if remote == false && access != .local {
                        throw fail(
                            "\(field).access",
                            "is \"\(access)\", but supportsRemoteSystems is false: leave one of them out")
                    }
                }
                return access
            }
            let interface = readInterface(entry, field: field, hasFunctions: hasFunctions)
            if let name, let access, let interface {
                services.append(Manifest.Service(name: name, access: access, interface: interface))
            } else {
                allRead = false
            }
        }
        return allRead ? services : nil
    }

    /// A service's `"access"`: "local", "paired", "any", or {"devices": [identities]}.
    func readAccess(_ value: JSONValue, field: String) throws(ManifestError) -> Manifest.Access {
        switch value {
        case .string("local"): return .local
        case .string("paired"): return .paired
        case .string("any"): return .any
        case .object(let object):
            guard object.count == 1, case .array(let list)? = object["devices"] else {
                throw fail(field, "must be \"local\", \"paired\", \"any\" or {\"devices\": [identities]}")
            }
            var devices: [String] = []
            for (index, item) in list.enumerated() {
                guard case .string(let identity) = item, identity.count >= 8, identity.count <= 64,
                    identity.allSatisfy({ "0123456789abcdef".contains($0) })
                else {
                    throw fail(
                        "\(field).devices[\(index)]",
                        "must be a device's identity, or at least its first 8 digits, in lowercase hex (atrium devices lists them)"
                    )
                }
                devices.append(identity)
            }
            guard !devices.isEmpty else { throw fail("\(field).devices", "names no device; use \"local\" for none") }
            return .devices(devices)
        default:
            throw fail(field, "must be \"local\", \"paired\", \"any\" or {\"devices\": [identities]}")
        }
    }

    /// How many commands a service, and how many fields a command, may declare; how long a
    /// name and a description may be. An interface travels whole in an `apps` answer.
    static let maxCommands = 256
    static let maxFields = 256
    static let maxNameLength = 128
    static let maxDescriptionLength = 500

    /// A service's `commands` (and `commandKey`): each command checked on its own, up to its
    /// first mistake. `.some(nil)` when it declares none; nil when something is wrong. In a
    /// package of declared functions, the functions declare the commands: a service does not.
    func readInterface(_ entry: [String: JSONValue], field: String, hasFunctions: Bool) -> ServiceInterface?? {
        let commandKey = section { () throws(ManifestError) -> String in
            guard let value = entry["commandKey"] else { return ServiceInterface.defaultCommandKey }
            if entry["commands"] == nil {
                throw fail("\(field).commandKey", "names the key of a command: it needs \"commands\"")
            }
            return try name(value, field: "\(field).commandKey", what: "the key a request names its command by")
        }
        guard let value = entry["commands"] else { return commandKey == nil ? nil : .some(nil) }
        if hasFunctions {
            record(
                fail(
                    "\(field).commands",
                    "a package of declared functions takes the commands its functions declare: leave commands out"))
            return nil
        }
        guard case .array(let list) = value, !list.isEmpty, list.count <= Self.maxCommands else {
            record(
                fail(
                    "\(field).commands",
                    "must be an array of 1 to \(Self.maxCommands) commands, like [{\"command\": \"put\", \"fields\": [{\"name\": \"Key\", \"type\": \"string\"}]}]"
                ))
            return nil
        }
        var names: Set<String> = []
        let commands = readEach(list) { (index, item) throws(ManifestError) -> ServiceInterface.Command in
            try readCommand(item, field: "\(field).commands[\(index)]", commandKey: commandKey, names: &names)
        }
        guard let commands, let commandKey else { return nil }
        return ServiceInterface(commandKey: commandKey, commands: commands)
    }

    func readCommand(_ item: JSONValue, field: String, commandKey: String?, names: inout Set<String>)
        throws(ManifestError) -> ServiceInterface.Command
    {
        guard case .object(let entry) = item else {
            throw fail(field, "must be an object like {\"command\": \"put\", \"fields\": [...]}")
        }
        warnUnknownKeys(entry, at: field, known: Self.commandKeys)
        guard let commandValue = entry["command"] else { throw fail("\(field).command", "is missing") }
        let command = try name(commandValue, field: "\(field).command", what: "the value that selects the command")
        guard names.insert(command).inserted else {
            throw fail("\(field).command", "\"\(command)\" is declared twice")
        }
        let description = try entry["description"].map { (value) throws(ManifestError) in
            try describing(value, field: "\(field).description")
        }
        var additionalFields = false
        if let flag = entry["additionalFields"] {
            guard case .bool(let value) = flag else {
                throw fail("\(field).additionalFields", "must be true or false, not \(flag)")
            }
            additionalFields = value
        }
        var fields: [ServiceInterface.Field] = []
        if let value = entry["fields"] {
            guard case .array(let list) = value, list.count <= Self.maxFields else {
                throw fail("\(field).fields", "must be an array of at most \(Self.maxFields) fields")
            }
            var fieldNames: Set<String> = []
            for (index, item) in list.enumerated() {
                let at = "\(field).fields[\(index)]"
                guard case .object(let spec) = item else {
                    throw fail(at, "must be an object like {\"name\": \"Key\", \"type\": \"string\"}")
                }
                warnUnknownKeys(spec, at: at, known: Self.fieldKeys)
                guard let nameValue = spec["name"] else { throw fail("\(at).name", "is missing") }
                let fieldName = try name(nameValue, field: "\(at).name", what: "the message's key")
                if fieldName == commandKey {
                    throw fail("\(at).name", "\"\(fieldName)\" is the command's own key, not a field")
                }
                guard fieldNames.insert(fieldName).inserted else {
                    throw fail("\(at).name", "\"\(fieldName)\" is declared twice")
                }
                fields.append(try readField(spec, name: fieldName, field: at))
            }
        }
        return ServiceInterface.Command(
            name: command, description: description, fields: fields, additionalFields: additionalFields)
    }

    func readField(_ spec: [String: JSONValue], name: String, field: String) throws(ManifestError)
        -> ServiceInterface.Field
    {
        let types = ServiceInterface.FieldType.names.joined(separator: ", ")
        guard let typeValue = spec["type"] else { throw fail("\(field).type", "is missing; the types are \(types)") }
        guard case .string(let typeName) = typeValue, ServiceInterface.FieldType.names.contains(typeName) else {
            var suggestion = ""
            if case .string(let given) = typeValue {
                suggestion = Suggestion.didYouMean(given, among: ServiceInterface.FieldType.names)
            }
            throw fail("\(field).type", "must be one of \(types), not \(typeValue)\(suggestion)")
        }
        var element: String?
        if let of = spec["of"] {
            let kinds = Value.Kind.allCases.filter { $0 != .array }.map(\.rawValue)
            guard typeName == Value.Kind.array.rawValue else {
                throw fail("\(field).of", "is the kind of an array's elements: it needs \"type\": \"array\"")
            }
            guard case .string(let kind) = of, kinds.contains(kind) else {
                throw fail("\(field).of", "must be one of \(kinds.joined(separator: ", ")), not \(of)")
            }
            element = kind
        }
        var optional = false
        if let flag = spec["optional"] {
            guard case .bool(let value) = flag else {
                throw fail("\(field).optional", "must be true or false, not \(flag)")
            }
            optional = value
        }
        let description = try spec["description"].map { (value) throws(ManifestError) in
            try describing(value, field: "\(field).description")
        }
        // Both names were checked above.
        let type = ServiceInterface.FieldType(type: typeName, of: element) ?? .any
        return ServiceInterface.Field(name: name, type: type, optional: optional, description: description)
    }

    /// A command's or a field's name: a key of a message, printable, at most 128 characters.
    func name(_ value: JSONValue, field: String, what: String) throws(ManifestError) -> String {
        guard case .string(let text) = value, !text.isEmpty, text.count <= Self.maxNameLength else {
            throw fail(field, "must be a string of 1 to \(Self.maxNameLength) characters (\(what)), not \(value)")
        }
        if text.unicodeScalars.contains(where: isInvisibleOrControl) {
            throw fail(field, "\"\(untrusted(text, limit: 80))\" holds a control or invisible character")
        }
        return text
    }

    /// A description: printable text of at most 500 characters.
    func describing(_ value: JSONValue, field: String) throws(ManifestError) -> String {
        guard case .string(let text) = value, text.count <= Self.maxDescriptionLength else {
            throw fail(field, "must be a string of at most \(Self.maxDescriptionLength) characters")
        }
        if text.unicodeScalars.contains(where: isInvisibleOrControl) {
            throw fail(field, "holds a control or invisible character (a description is one line of text)")
        }
        return text
    }

    /// `schemes`: each one checked on its own.
    func readSchemes(_ value: JSONValue?) -> [String]? {
        guard let value else { return [] }
        guard case .array(let list) = value else {
            record(fail("schemes", "must be an array of strings"))
            return nil
        }
        var seen: Set<String> = []
        return readEach(list) { (index, item) throws(ManifestError) -> String in
            guard case .string(let scheme) = item else { throw fail("schemes[\(index)]", "must be a string") }
            guard Manifest.isScheme(scheme) else {
                throw fail(
                    "schemes[\(index)]",
                    "\"\(untrusted(scheme, limit: 80))\" is not a URI scheme (RFC 3986: a letter, then letters, digits, +, - or .)"
                )
            }
            let lowered = scheme.lowercased()
            guard seen.insert(lowered).inserted else {
                throw fail("schemes[\(index)]", "\"\(untrusted(scheme, limit: 80))\" is declared twice")
            }
            return lowered
        }
    }

    /// `launch`: a program for a package without a library to hand its schemes' URIs to.
    func readLaunch(_ value: JSONValue?, hasLibrary: Bool?, schemes: [String]?) -> ExecLauncher?? {
        guard let value else { return .some(nil) }
        return section { () throws(ManifestError) -> ExecLauncher? in
            guard case .object(let entry) = value else {
                throw fail("launch", "must be an object like {\"exec\": [\"/usr/bin/xdg-open\", \"{uri}\"]}")
            }
            warnUnknownKeys(entry, at: "launch", known: Self.launchKeys)
            guard case .array(let words)? = entry["exec"], !words.isEmpty else {
                throw fail(
                    "launch.exec",
                    "must be a non-empty array: the program, then its arguments, with {uri} where the URI goes")
            }
            var command: [String] = []
            for (index, word) in words.enumerated() {
                guard case .string(let text) = word, !(index == 0 && text.isEmpty) else {
                    throw fail("launch.exec[\(index)]", index == 0 ? "must be the program's path" : "must be a string")
                }
                command.append(text)
            }
            var wait = false
            if let flag = entry["wait"] {
                guard case .bool(let value) = flag else {
                    throw fail("launch.wait", "must be true or false, not \(flag)")
                }
                wait = value
            }
            var timeout = 10.0
            if let seconds = entry["timeoutSeconds"] {
                guard case .number(let value) = seconds, value > 0, value <= 3600 else {
                    throw fail("launch.timeoutSeconds", "must be a number of seconds above 0 and at most 3600")
                }
                timeout = value
            }
            if hasLibrary == true {
                throw fail(
                    "launch",
                    "a package with a library handles launches in its plugin; launch.exec is for packages without one")
            }
            if schemes?.isEmpty == true { throw fail("launch", "needs schemes to handle") }
            return ExecLauncher(command: command, wait: wait, timeoutSeconds: timeout)
        }
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

    /// `functions` (docs/FFI.md): each function checked on its own (up to its first mistake).
    func readFunctions(_ value: JSONValue?, hasLibrary: Bool?) -> [DeclaredFunction]? {
        guard let value else { return [] }
        if hasLibrary == false {
            record(fail("functions", "need a library to find the functions in"))
            return nil
        }
        guard case .array(let list) = value, !list.isEmpty else {
            record(fail("functions", "must be a non-empty array"))
            return nil
        }
        var commands: Set<String> = []
        return readEach(list) { (index, item) throws(ManifestError) -> DeclaredFunction in
            try readFunction(item, field: "functions[\(index)]", commands: &commands)
        }
    }

    /// One function; `commands` are the commands given so far (by functions read or not).
    func readFunction(_ item: JSONValue, field: String, commands: inout Set<String>) throws(ManifestError)
        -> DeclaredFunction
    {
        let types = DeclaredFunction.CType.allCases.map(\.rawValue).joined(separator: " ")
        guard case .object(let entry) = item else { throw fail(field, "must be an object") }
        warnUnknownKeys(entry, at: field, known: Self.functionKeys)
        guard case .string(let command)? = entry["command"], !command.isEmpty else {
            throw fail("\(field).command", "must be a non-empty string: the Command value that calls the function")
        }
        guard commands.insert(command).inserted else {
            throw fail("\(field).command", "\"\(untrusted(command, limit: 80))\" is declared twice")
        }
        guard case .string(let symbol)? = entry["symbol"], !symbol.isEmpty else {
            throw fail("\(field).symbol", "must be the C function's name")
        }
        var parameters: [DeclaredFunction.Parameter] = []
        var typeOf: [String: DeclaredFunction.CType] = [:]
        if let params = entry["params"] {
            guard case .array(let list) = params else { throw fail("\(field).params", "must be an array") }
            for (position, param) in list.enumerated() {
                let where_ = "\(field).params[\(position)]"
                guard case .object(let spec) = param, case .string(let name)? = spec["name"], !name.isEmpty else {
                    throw fail(where_, "must be an object with a name and a type")
                }
                warnUnknownKeys(spec, at: where_, known: Self.parameterKeys)
                guard case .string(let typeName)? = spec["type"], let type = DeclaredFunction.CType(rawValue: typeName),
                    type != .void
                else {
                    throw fail("\(where_).type", "must be one of: \(types.replacingOccurrences(of: " void", with: ""))")
                }
                guard typeOf.updateValue(type, forKey: name) == nil else {
                    throw fail("\(where_).name", "\"\(untrusted(name, limit: 80))\" is declared twice")
                }
                var lengthOf: String?
                if let target = spec["lengthOf"] {
                    guard case .string(let targetName) = target else {
                        throw fail("\(where_).lengthOf", "must name a bytes parameter")
                    }
                    guard type.isInteger else {
                        throw fail("\(where_).lengthOf", "needs an integer type, not \(type.rawValue)")
                    }
                    lengthOf = targetName
                }
                parameters.append(.init(name: name, type: type, lengthOf: lengthOf))
            }
        }
        for parameter in parameters {
            guard let target = parameter.lengthOf else { continue }
            guard typeOf[target] == .bytes else {
                throw fail(
                    "\(field).params",
                    "\"\(untrusted(parameter.name, limit: 80))\" is the lengthOf \"\(untrusted(target, limit: 80))\", which is not a bytes parameter of this function"
                )
            }
        }
        var returns = DeclaredFunction.CType.void
        var ownership: DeclaredFunction.StringOwnership?
        switch entry["returns"] {
        case nil:
            break
        case .string(let name)?:
            guard let type = DeclaredFunction.CType(rawValue: name), type != .bytes else {
                throw fail(
                    "\(field).returns",
                    "must be one of: \(types.replacingOccurrences(of: " bytes", with: "")) (bytes cannot be returned: their length is unknown)"
                )
            }
            returns = type
            if type == .string { ownership = .library }
        case .object(let spec)?:
            warnUnknownKeys(spec, at: "\(field).returns", known: ["type", "free"])
            guard case .string("string")? = spec["type"], case .string(let free)? = spec["free"], !free.isEmpty
            else {
                throw fail("\(field).returns", "an object must be {\"type\": \"string\", \"free\": \"FUNCTION\"}")
            }
            returns = .string
            ownership = .free(free)
        default:
            throw fail("\(field).returns", "must be a type name or {\"type\": \"string\", \"free\": \"FUNCTION\"}")
        }
        return DeclaredFunction(
            command: command, symbol: symbol, parameters: parameters, returns: returns, ownership: ownership)
    }
}
