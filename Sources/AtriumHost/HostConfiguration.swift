import AtriumDiscovery
public import AtriumProtocol
import AtriumTLS
public import AtriumTransfers
import Crypto
public import Foundation

/// Everything a host needs to know to start. The defaults are what `atriumd` uses when run
/// with no options from the repository's root.
public struct HostConfiguration: Sendable {
    /// Where `--metrics` serves Prometheus's text format (`GET /metrics`); nil: no metrics are
    /// kept at all.
    public var metricsHost: String?
    public var metricsPort = 9340
    /// The folders of package manifests, read in order (``ManifestDirectory``).
    public var manifestFolders: [URL]
    /// Whether a folder of ``manifestFolders`` that does not exist is passed over (as the
    /// standard folders are) rather than refused.
    public var skipMissingManifestFolders = false
    /// The TCP address to listen on; port 0 picks a free port. `nil` for no TCP listener.
    public var listenHost: String?
    public var listenPort: Int
    /// The Unix domain socket for local clients, or `nil` for none.
    public var socketPath: String?
    /// Listening sockets systemd passed (socket activation): used as they are, instead of
    /// binding `listenHost`/`listenPort` (for a TCP one) or `socketPath` (for a Unix one),
    /// which then name what they are bound to.
    public var activatedSockets: [Systemd.ActivatedSocket] = []
    /// Told when the host is ready, reloads and stops (systemd's `Type=notify`).
    public var notifier: Systemd.Notifier?
    /// Where relative `library` paths are looked for after the manifest's own folder.
    public var pluginSearchPath: [URL]
    /// The limits announced in `welcome` and enforced.
    public var limits: ProtocolLimits
    /// How long a plugin has to answer a request before the client gets status 2.
    public var responseTimeout: Duration
    /// How long shutdown waits for requests in flight before answering them with status 4.
    public var drainTimeout: Duration
    /// The largest `data` a launch may carry; larger is answered with ValueSetTooLarge (5).
    public var launchDataLimit: Int
    /// Which schemes remote clients may launch, and which handler wins.
    public var launchPolicy: LaunchPolicy
    /// What clients may make the host hold: connections, time, bytes, launches.
    public var admission: AdmissionLimits
    /// The tokens clients may present in `hello` (`--token-file`), or `nil` when the host has
    /// none: then a TCP client needs no token, and a client that sends one is refused, since
    /// the host cannot check it (CONTRACT section 7).
    public var tokens: Set<String>?
    /// Whether manifests, plugin libraries and their folders must be safe from other users
    /// (owned by root or the host's user, not writable by group or others), as sshd's
    /// StrictModes checks its files.
    public var strictModes: Bool
    /// Reported in `welcome`.
    public var hostName: String
    /// Reported in `welcome`: an id for this host that is stable across restarts and says
    /// nothing else about the machine (see ``appSpecificMachineId()``).
    public var hostId: String
    /// The program that runs worker processes (`atriumd --worker`), for packages with
    /// `"isolation": "process"`; nil when this host cannot start them (they then fail to load).
    public var workerExecutable: URL?
    /// Whether a change in the manifests folder reloads the manifests (inotify); SIGHUP
    /// always does.
    public var watchManifests = true
    /// A group whose members may use the local socket too (its file then mode 0660, that
    /// group's); nil: only the host's user (and root).
    public var socketGroup: String?
    /// Where the audit log goes (JSON lines), or nil for none.
    public var auditLog: URL?
    /// How the TCP listener treats TLS.
    public var tls = TLSMode.auto
    /// Whether TCP clients must be paired devices (CONTRACT section 7).
    public var pairing = PairingMode.auto
    /// How long a pairing request waits for the operator before it is answered TimedOut.
    public var pairingTimeout: Duration = .seconds(120)

    /// Whether TCP clients must pair: `auto` asks it when the host listens on an address other
    /// than loopback.
    public var pairingRequired: Bool {
        switch pairing {
        case .auto: listenHost != nil && !listensOnLoopbackOnly
        case .required: true
        case .off: false
        }
    }
    /// Whether the host advertises itself with DNS-SD (`_atrium._tcp`, through avahi-daemon)
    /// when its TCP listener is reachable from the network (docs/DISCOVERY.md).
    public var advertise = true
    /// The name it advertises under; nil: the machine's pretty hostname, read again on SIGHUP.
    public var advertisedName: String?
    /// What kind of machine this is (systemd's chassis names), in `welcome` and the DNS-SD
    /// record.
    public var kind = MachineKind.detect()

    /// Where the host keeps its identity (and, later, what it learns): made mode 0700 at
    /// first start.
    public var stateFolder = TLSIdentity.defaultStateFolder()

    /// The limits of transfers (CONTRACT section 8; `--transfer-*`).
    public var transferLimits = TransferLimits()
    /// Where transfers' journal and spool are: `STATE/transfers` unless set.
    public var transferFolder: URL?

    public init(
        manifestFolders: [URL] = [URL(fileURLWithPath: "manifests")],
        listenHost: String? = "127.0.0.1",
        listenPort: Int = 7340,
        socketPath: String? = HostConfiguration.defaultSocketPath(),
        pluginSearchPath: [URL] = HostConfiguration.defaultPluginSearchPath(),
        limits: ProtocolLimits = .default,
        responseTimeout: Duration = .seconds(30),
        drainTimeout: Duration = .seconds(10),
        launchDataLimit: Int = 100 * 1024,
        launchPolicy: LaunchPolicy = LaunchPolicy(),
        admission: AdmissionLimits = .default,
        tokens: Set<String>? = nil,
        strictModes: Bool = true,
        hostName: String = ProcessInfo.processInfo.hostName,
        hostId: String = HostConfiguration.appSpecificMachineId()
    ) {
        self.manifestFolders = manifestFolders
        self.listenHost = listenHost
        self.listenPort = listenPort
        self.socketPath = socketPath
        self.pluginSearchPath = pluginSearchPath
        self.limits = limits
        self.responseTimeout = responseTimeout
        self.drainTimeout = drainTimeout
        self.launchDataLimit = launchDataLimit
        self.launchPolicy = launchPolicy
        self.admission = admission
        self.tokens = tokens
        self.strictModes = strictModes
        self.hostName = hostName
        self.hostId = hostId
    }

    /// Where manifests are read from when none is named: `/etc/atrium/manifests.d` (the
    /// administrator's), `/usr/share/atrium/manifests` (packages'), then the user's
    /// `$XDG_DATA_HOME/atrium/manifests` (`~/.local/share/atrium/manifests`; none for a user
    /// without a home, such as systemd's DynamicUser).
    public static func standardManifestFolders(environment: [String: String] = ProcessInfo.processInfo.environment)
        -> [URL]
    {
        var folders = ["/etc/atrium/manifests.d", "/usr/share/atrium/manifests"].map { URL(fileURLWithPath: $0) }
        if let data = userFolder(environment, "XDG_DATA_HOME", orInHome: ".local/share") {
            folders.append(URL(fileURLWithPath: data).appendingPathComponent("atrium/manifests"))
        }
        return folders
    }

    /// An XDG base folder: the variable when it is an absolute path, else `~/inHome`, or nil
    /// without a home (no HOME, or `/`).
    public static func userFolder(_ environment: [String: String], _ variable: String, orInHome: String) -> String? {
        if let value = environment[variable], value.hasPrefix("/") { return value }
        guard let home = environment["HOME"], home.hasPrefix("/"), home != "/" else { return nil }
        return home + "/" + orInHome
    }

    /// `$XDG_RUNTIME_DIR/atrium/atriumd.sock`, or `/tmp/atrium-<uid>/atriumd.sock` without it.
    public static func defaultSocketPath() -> String { defaultLocalSocketPath() }

    /// Whether the TCP listen address is a loopback one (127.0.0.0/8, ::1, localhost).
    public var listensOnLoopbackOnly: Bool {
        guard let host = listenHost else { return true }
        return isLoopbackHost(host)
    }

    /// Where plugin libraries are looked for when `--plugin-path` is not given: the folder of
    /// atriumd (where `swift build` puts them), then `lib/atrium/plugins` beside its `bin`
    /// (where Scripts/install.sh and the package put them).
    public static func defaultPluginSearchPath() -> [URL] {
        let folder = executableFolder()
        return [folder, folder.deletingLastPathComponent().appendingPathComponent("lib/atrium/plugins")]
    }

    /// The folder of the running executable, where `swift build` puts the plugin libraries.
    public static func executableFolder() -> URL {
        let path =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: path).deletingLastPathComponent()
    }

    /// The id this host reports, derived from `/etc/machine-id` as systemd's
    /// `sd_id128_get_machine_app_specific` does: HMAC-SHA256 keyed with the machine id over
    /// Atrium's own application id, formatted as a version 4 UUID. It is stable across
    /// restarts, differs from every other application's, and does not reveal the machine id,
    /// which machine-id(5) asks never to expose. A random id when there is no machine id.
    public static func appSpecificMachineId(machineIdFile: String = "/etc/machine-id") -> String {
        guard let text = try? String(contentsOfFile: machineIdFile, encoding: .utf8),
            let machine = hexBytes(text.trimmingCharacters(in: .whitespacesAndNewlines)), machine.count == 16
        else {
            return UUID().uuidString.lowercased()
        }
        var digest = Array(
            HMAC<SHA256>.authenticationCode(for: atriumApplicationId, using: SymmetricKey(data: machine)))
        digest[6] = (digest[6] & 0x0f) | 0x40
        digest[8] = (digest[8] & 0x3f) | 0x80
        let uuid = UUID(
            uuid: (
                digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7], digest[8],
                digest[9], digest[10], digest[11], digest[12], digest[13], digest[14], digest[15]
            ))
        return uuid.uuidString.lowercased()
    }

    /// Atrium's application id for ``appSpecificMachineId(machineIdFile:)`` (fixed: changing
    /// it changes every host's id).
    static let atriumApplicationId: [UInt8] = [
        0x6f, 0x1a, 0x52, 0x3c, 0x8e, 0x27, 0x4d, 0x09, 0xb4, 0x35, 0x2e, 0x70, 0xa1, 0x5c, 0xd8, 0x13,
    ]

    static func hexBytes(_ text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let high = hexValue(digits[index]), let low = hexValue(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    private static func hexValue(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
