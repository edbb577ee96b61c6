public import AtriumProtocol
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
        /// The commands it takes (`"commands"`): when declared, the host checks every request
        /// against them before the service sees it.
        public var interface: ServiceInterface? = nil
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
    public func service(named name: String) -> Service? {
        services.first { $0.name == name }
    }

    /// What a service takes, for a client to read (`atrium describe`): the commands it
    /// declares, or, in a package of declared functions, the functions' commands and
    /// arguments. Nil when it says nothing of its messages.
    public func describedInterface(of service: Service) -> ServiceInterface? {
        if let declared = service.interface { return declared }
        guard !functions.isEmpty else { return nil }
        return ServiceInterface(commands: functions.map(\.describedCommand))
    }
}

/// Why a manifest was refused: the file, the field, and the rule it broke.
public struct ManifestError: Error, Sendable, Hashable, CustomStringConvertible {
    public var file: String
    public var field: String?
    public var reason: String
    /// The line of the manifest the field is on, when it is known.
    public var line: Int?
    /// The manifest file, when the problem was found reading a folder (``file`` is its label:
    /// its name, or its path when there are several folders).
    public var url: URL?

    public init(file: String, field: String?, reason: String, line: Int? = nil, url: URL? = nil) {
        self.file = file
        self.field = field
        self.reason = reason
        self.line = line
        self.url = url
    }

    /// `file:line: field: reason`, as compilers write it (editors jump to the line).
    public var description: String {
        "\(file)\(line.map { ":\($0)" } ?? ""): \(detail)"
    }

    /// The field and the reason, without the file.
    public var detail: String {
        if let field { return "\(field): \(reason)" }
        return reason
    }
}

extension Manifest {
    /// The manifest version this host reads.
    public static let supportedVersion = 1

    /// The most a manifest file may hold: a real one is a few kilobytes.
    public static let maxBytes = 1 << 20

    /// Why `name` is not a valid package or service name, or nil.
    static func identifierProblem(_ name: String) -> String? {
        if name.isEmpty { return "must not be empty" }
        if name.count > 255 { return "is \(name.count) characters long; the limit is 255" }
        if let bad = name.unicodeScalars.first(where: { !isIdentifierScalar($0) }) {
            return
                "\"\(untrusted(name, limit: 80))\" holds \"\(untrusted(String(bad)))\": only letters, digits, '.', '_' and '-' are allowed"
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
        case .string(let value): "the string \"\(untrusted(value, limit: 80))\""
        case .array: "an array"
        case .object: "an object"
        }
    }
}
