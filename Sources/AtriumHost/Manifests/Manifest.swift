public import Foundation

/// One package, as its JSON manifest declares it (docs/MANIFEST.md).
public struct Manifest: Sendable, Hashable {
    /// One app service of the package.
    public struct Service: Sendable, Hashable {
        public var name: String
        /// Whether clients on other machines (TCP) may open it; local-socket clients always may.
        public var supportsRemoteSystems: Bool { access != .local }
        /// Which TCP clients may open it (`"access"`; CONTRACT section 7).
        public var access: Access
    }

    /// Which callers a service accepts. Local clients (the Unix socket) always may open it.
    public enum Access: Sendable, Hashable, CustomStringConvertible {
        /// Local clients only (`"local"`, or `supportsRemoteSystems` false or absent).
        case local
        /// Paired devices, and every TCP client on a host that does not require pairing
        /// (`"paired"`, or `supportsRemoteSystems: true`).
        case paired
        /// Only these paired devices: identities, or at least their first 8 hex digits
        /// (`{"devices": [...]}`).
        case devices([String])
        /// Every TCP client, paired or not, even where pairing is required (`"any"`: only by
        /// this explicit choice).
        case any

        public var description: String {
            switch self {
            case .local: "local clients only"
            case .paired: "paired devices"
            case .devices(let list): "the devices \(list.joined(separator: ", "))"
            case .any: "any client"
            }
        }
    }

    public var manifestVersion: Int
    public var package: String
    public var displayName: String
    /// The plugin's shared library, as written in the manifest.
    public var library: String?
    public var services: [Service]
    /// URI schemes, lowercased.
    public var schemes: [String]
    /// The `config` object, as JSON text ("{}" when absent).
    public var configJSON: String
    /// Whether the plugin's callbacks may run concurrently.
    public var concurrent: Bool
    /// A program that handles the package's schemes, for a package with no library.
    public var launch: ExecLauncher?
    /// C functions of the library that answer requests by their `Command`.
    public var functions: [DeclaredFunction] = []
    /// Where the plugin runs: in the host's process, or in a worker process of its own.
    public var isolation: Isolation = .inProcess
    /// What a worker process may use (only with `isolation: process`).
    public var workerLimits = WorkerLimits()
    /// The user a worker process runs as (only with `isolation: process`; atriumd must run
    /// as root to switch to it). Nil: atriumd's own user.
    public var workerUser: String?
    /// Top-level keys this host does not know (ignored; the loader warns about them).
    public var unknownKeys: [String] = []
    /// The file it came from.
    public var file: URL

    /// Where a package's plugin runs (`"isolation"` in the manifest).
    public enum Isolation: String, Sendable, Hashable, CaseIterable {
        /// Loaded into `atriumd` itself: the fastest, and a crash takes the host down with it.
        case inProcess
        /// In a worker process of its own: a crash, a leak or a spin stays there.
        case process
    }

    /// Limits on a worker process (`"limits"`): each nil one is not set.
    public struct WorkerLimits: Sendable, Hashable {
        /// Address space, in MiB (RLIMIT_AS).
        public var memoryMB: Int?
        /// Open files (RLIMIT_NOFILE).
        public var openFiles: Int?
        /// CPU time, in seconds (RLIMIT_CPU): past it, the worker is killed and restarted.
        public var cpuSeconds: Int?
        public init(memoryMB: Int? = nil, openFiles: Int? = nil, cpuSeconds: Int? = nil) {
            self.memoryMB = memoryMB
            self.openFiles = openFiles
            self.cpuSeconds = cpuSeconds
        }
    }

    /// The service named `name`, if the package declares it.
    /// Reads a service's `"access"`: "local", "paired", "any", or {"devices": [identities]}.
    static func access(_ value: JSONValue, field: String, fail: (String?, String) -> ManifestError)
        throws(ManifestError)
        -> Access
    {
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

    public func service(named name: String) -> Service? {
        services.first { $0.name == name }
    }
}

/// Why a manifest was refused: the file, the field, and the rule it broke.
public struct ManifestError: Error, Sendable, Hashable, CustomStringConvertible {
    public var file: String
    public var field: String?
    public var reason: String

    public init(file: String, field: String?, reason: String) {
        self.file = file
        self.field = field
        self.reason = reason
    }

    public var description: String {
        if let field { return "\(file): \(field): \(reason)" }
        return "\(file): \(reason)"
    }
}

extension Manifest {
    /// The manifest version this host reads.
    public static let supportedVersion = 1

    /// The most a manifest file may hold: a real one is a few kilobytes.
    public static let maxBytes = 1 << 20

    /// Parses and validates one manifest. `file` is used for `file` and in errors.
    ///
    /// - Throws: ``ManifestError`` naming the file, the field and the rule broken.
    public init(json data: Data, file: URL) throws(ManifestError) {
        let name = file.lastPathComponent
        func fail(_ field: String?, _ reason: String) -> ManifestError {
            ManifestError(file: name, field: field, reason: reason)
        }
        // Strict JSON (RFC 8259): a trailing comma, a comment or a key given twice is refused
        // with its line, not read one way or another.
        guard data.count <= Self.maxBytes else {
            throw fail(nil, "is \(data.count) bytes; a manifest may be at most \(Self.maxBytes) (1 MiB)")
        }
        let root: [String: JSONValue]
        do {
            guard case .object(let object) = try StrictJSON([UInt8](data)).value else {
                throw fail(nil, "must hold a JSON object")
            }
            root = object
        } catch let error as ManifestError {
            throw error
        } catch {
            throw fail(nil, "is not valid JSON: \(error)")
        }

        guard let version = root["manifestVersion"] else { throw fail("manifestVersion", "is missing") }
        guard case .number(1) = version else {
            throw fail("manifestVersion", "must be 1, not \(version)")
        }

        guard let package = root["package"] else { throw fail("package", "is missing") }
        guard case .string(let packageName) = package else { throw fail("package", "must be a string, not \(package)") }
        if let problem = Self.identifierProblem(packageName) { throw fail("package", problem) }

        var displayName = packageName
        if let value = root["displayName"] {
            guard case .string(let text) = value, !text.isEmpty else {
                throw fail("displayName", "must be a non-empty string")
            }
            displayName = text
        }

        var library: String?
        if let value = root["library"] {
            guard case .string(let text) = value, !text.isEmpty else {
                throw fail("library", "must be a non-empty string (a path to the plugin's shared library)")
            }
            library = text
        }

        var services: [Service] = []
        if let value = root["services"] {
            guard case .array(let list) = value else { throw fail("services", "must be an array") }
            for (index, item) in list.enumerated() {
                let field = "services[\(index)]"
                guard case .object(let entry) = item else { throw fail(field, "must be an object") }
                guard let nameValue = entry["name"] else { throw fail("\(field).name", "is missing") }
                guard case .string(let serviceName) = nameValue else { throw fail("\(field).name", "must be a string") }
                if let problem = Self.identifierProblem(serviceName) { throw fail("\(field).name", problem) }
                if services.contains(where: { $0.name == serviceName }) {
                    throw fail("\(field).name", "\"\(serviceName)\" is declared twice in this package")
                }
                var remote: Bool?
                if let flag = entry["supportsRemoteSystems"] {
                    guard case .bool(let value) = flag else {
                        throw fail("\(field).supportsRemoteSystems", "must be true or false, not \(flag)")
                    }
                    remote = value
                }
                var access: Access = remote == true ? .paired : .local
                if let value = entry["access"] {
                    access = try Self.access(value, field: "\(field).access", fail: fail)
                    if remote == false && access != .local {
                        throw fail(
                            "\(field).access",
                            "is \"\(access)\", but supportsRemoteSystems is false: leave one of them out")
                    }
                }
                services.append(Service(name: serviceName, access: access))
            }
        }
        if !services.isEmpty && library == nil {
            throw fail("library", "is missing: a package with services needs a plugin library")
        }

        var schemes: [String] = []
        if let value = root["schemes"] {
            guard case .array(let list) = value else { throw fail("schemes", "must be an array of strings") }
            for (index, item) in list.enumerated() {
                guard case .string(let scheme) = item else { throw fail("schemes[\(index)]", "must be a string") }
                guard Self.isScheme(scheme) else {
                    throw fail(
                        "schemes[\(index)]",
                        "\"\(scheme)\" is not a URI scheme (RFC 3986: a letter, then letters, digits, +, - or .)"
                    )
                }
                let lowered = scheme.lowercased()
                if schemes.contains(lowered) { throw fail("schemes[\(index)]", "\"\(scheme)\" is declared twice") }
                schemes.append(lowered)
            }
        }

        var configJSON = "{}"
        if let value = root["config"] {
            guard case .object = value else { throw fail("config", "must be a JSON object, not \(value)") }
            let object = (try? JSONSerialization.jsonObject(with: data) as? [String: Any])?["config"] ?? [:]
            let encoded =
                (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
            configJSON = String(decoding: encoded, as: UTF8.self)
        }

        var concurrent = false
        if let value = root["concurrent"] {
            guard case .bool(let flag) = value else { throw fail("concurrent", "must be true or false, not \(value)") }
            concurrent = flag
        }

        var launch: ExecLauncher?
        if let value = root["launch"] {
            guard case .object(let entry) = value else {
                throw fail("launch", "must be an object like {\"exec\": [\"/usr/bin/xdg-open\", \"{uri}\"]}")
            }
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
            guard library == nil else {
                throw fail(
                    "launch",
                    "a package with a library handles launches in its plugin; launch.exec is for packages without one")
            }
            guard !schemes.isEmpty else { throw fail("launch", "needs schemes to handle") }
            launch = ExecLauncher(command: command, wait: wait, timeoutSeconds: timeout)
        }

        var functions: [DeclaredFunction] = []
        if let value = root["functions"] {
            guard library != nil else { throw fail("functions", "need a library to find the functions in") }
            functions = try Self.functions(value, fail)
        }

        var isolation = Isolation.inProcess
        if let value = root["isolation"] {
            let names = Isolation.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: " or ")
            guard case .string(let text) = value, let chosen = Isolation(rawValue: text) else {
                throw fail("isolation", "must be \(names), not \(value)")
            }
            guard chosen == .inProcess || (library != nil && functions.isEmpty) else {
                throw fail("isolation", "\"process\" is for packages with a plugin library (not declared functions)")
            }
            isolation = chosen
        }
        var workerLimits = WorkerLimits()
        if let value = root["limits"] {
            guard isolation == .process else {
                throw fail("limits", "apply to a worker process: they need \"isolation\": \"process\"")
            }
            guard case .object(let entries) = value else {
                throw fail(
                    "limits", "must be an object like {\"memoryMB\": 256, \"openFiles\": 64, \"cpuSeconds\": 3600}")
            }
            for (key, entry) in entries {
                guard case .number(let number) = entry, number >= 1, number <= 1_000_000, number == number.rounded()
                else {
                    throw fail("limits.\(key)", "must be a whole number from 1 to 1000000")
                }
                switch key {
                case "memoryMB": workerLimits.memoryMB = Int(number)
                case "openFiles": workerLimits.openFiles = Int(number)
                case "cpuSeconds": workerLimits.cpuSeconds = Int(number)
                default:
                    throw fail("limits.\(key)", "is not a limit; the limits are memoryMB, openFiles and cpuSeconds")
                }
            }
            if let memory = workerLimits.memoryMB, memory < 64 {
                throw fail("limits.memoryMB", "must be at least 64: a worker needs that much address space to start")
            }
            if let files = workerLimits.openFiles, files < 16 {
                throw fail("limits.openFiles", "must be at least 16: a worker needs that many to start")
            }
        }

        var workerUser: String?
        if let value = root["user"] {
            guard isolation == .process else {
                throw fail("user", "is the user a worker process runs as: it needs \"isolation\": \"process\"")
            }
            guard case .string(let name) = value, !name.isEmpty, name.count <= 32,
                name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "_-.".contains($0)) })
            else {
                throw fail("user", "must be a user name (letters, digits, _ - and ., at most 32), not \(value)")
            }
            workerUser = name
        }

        self.init(
            manifestVersion: 1, package: packageName, displayName: displayName, library: library,
            services: services, schemes: schemes, configJSON: configJSON, concurrent: concurrent, launch: launch,
            functions: functions, file: file
        )
        self.isolation = isolation
        self.workerUser = workerUser
        self.workerLimits = workerLimits
        unknownKeys = root.keys.filter { !Self.knownKeys.contains($0) }.sorted()
    }

    static let knownKeys: Set<String> = [
        "manifestVersion", "package", "displayName", "library", "services", "schemes", "config", "concurrent",
        "launch", "functions", "isolation", "limits", "user",
    ]

    /// Reads and checks `functions` (docs/FFI.md).
    static func functions(_ value: JSONValue, _ fail: (String?, String) -> ManifestError) throws(ManifestError)
        -> [DeclaredFunction]
    {
        guard case .array(let list) = value, !list.isEmpty else { throw fail("functions", "must be a non-empty array") }
        let types = DeclaredFunction.CType.allCases.map(\.rawValue).joined(separator: " ")
        var functions: [DeclaredFunction] = []
        for (index, item) in list.enumerated() {
            let field = "functions[\(index)]"
            guard case .object(let entry) = item else { throw fail(field, "must be an object") }
            guard case .string(let command)? = entry["command"], !command.isEmpty else {
                throw fail("\(field).command", "must be a non-empty string: the Command value that calls the function")
            }
            if functions.contains(where: { $0.command == command }) {
                throw fail("\(field).command", "\"\(command)\" is declared twice")
            }
            guard case .string(let symbol)? = entry["symbol"], !symbol.isEmpty else {
                throw fail("\(field).symbol", "must be the C function's name")
            }
            var parameters: [DeclaredFunction.Parameter] = []
            if let params = entry["params"] {
                guard case .array(let list) = params else { throw fail("\(field).params", "must be an array") }
                for (position, param) in list.enumerated() {
                    let where_ = "\(field).params[\(position)]"
                    guard case .object(let spec) = param, case .string(let name)? = spec["name"], !name.isEmpty else {
                        throw fail(where_, "must be an object with a name and a type")
                    }
                    guard case .string(let typeName)? = spec["type"],
                        let type = DeclaredFunction.CType(rawValue: typeName),
                        type != .void
                    else {
                        throw fail(
                            "\(where_).type", "must be one of: \(types.replacingOccurrences(of: " void", with: ""))")
                    }
                    if parameters.contains(where: { $0.name == name }) {
                        throw fail("\(where_).name", "\"\(name)\" is declared twice")
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
                guard parameters.contains(where: { $0.name == target && $0.type == .bytes }) else {
                    throw fail(
                        "\(field).params",
                        "\"\(parameter.name)\" is the lengthOf \"\(target)\", which is not a bytes parameter of this function"
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
                guard case .string("string")? = spec["type"], case .string(let free)? = spec["free"], !free.isEmpty
                else {
                    throw fail("\(field).returns", "an object must be {\"type\": \"string\", \"free\": \"FUNCTION\"}")
                }
                returns = .string
                ownership = .free(free)
            default:
                throw fail("\(field).returns", "must be a type name or {\"type\": \"string\", \"free\": \"FUNCTION\"}")
            }
            functions.append(
                DeclaredFunction(
                    command: command, symbol: symbol, parameters: parameters, returns: returns, ownership: ownership)
            )
        }
        return functions
    }

    /// Why `name` is not a valid package or service name, or nil.
    static func identifierProblem(_ name: String) -> String? {
        if name.isEmpty { return "must not be empty" }
        if name.count > 255 { return "is \(name.count) characters long; the limit is 255" }
        if let bad = name.unicodeScalars.first(where: { !isIdentifierScalar($0) }) {
            return "\"\(name)\" holds \"\(bad)\": only letters, digits, '.', '_' and '-' are allowed"
        }
        return nil
    }

    static func isIdentifierScalar(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "a"..."z", "A"..."Z", "0"..."9", ".", "_", "-": true
        default: false
        }
    }

    /// RFC 3986: `scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`.
    public static func isScheme(_ text: String) -> Bool {
        guard let first = text.unicodeScalars.first, ("a"..."z").contains(first) || ("A"..."Z").contains(first) else {
            return false
        }
        return text.unicodeScalars.allSatisfy { scalar in
            switch scalar {
            case "a"..."z", "A"..."Z", "0"..."9", "+", "-", ".": true
            default: false
            }
        }
    }
}

/// Any JSON value, as ``StrictJSON`` reads it (so that `true` and `1` stay apart).
enum JSONValue: CustomStringConvertible {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// How the value reads in an error message.
    var description: String {
        switch self {
        case .null: "null"
        case .bool(let value): "\(value)"
        case .number(let value): value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : "\(value)"
        case .string(let value): "the string \"\(value)\""
        case .array: "an array"
        case .object: "an object"
        }
    }
}
