public import AtriumProtocol
public import Foundation

/// Everything a host needs to know to start. The defaults are what `atriumd` uses when run
/// with no options from the repository's root.
public struct HostConfiguration: Sendable {
    /// The folder of package manifests.
    public var manifestsFolder: URL
    /// The TCP address to listen on; port 0 picks a free port. `nil` for no TCP listener.
    public var listenHost: String?
    public var listenPort: Int
    /// The Unix domain socket for local clients, or `nil` for none.
    public var socketPath: String?
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
    /// Reported in `welcome`.
    public var hostName: String
    public var hostId: String

    public init(
        manifestsFolder: URL = URL(fileURLWithPath: "manifests"),
        listenHost: String? = "127.0.0.1",
        listenPort: Int = 7340,
        socketPath: String? = HostConfiguration.defaultSocketPath(),
        pluginSearchPath: [URL] = [HostConfiguration.executableFolder()],
        limits: ProtocolLimits = .default,
        responseTimeout: Duration = .seconds(30),
        drainTimeout: Duration = .seconds(10),
        launchDataLimit: Int = 100 * 1024,
        launchPolicy: LaunchPolicy = LaunchPolicy(),
        hostName: String = ProcessInfo.processInfo.hostName,
        hostId: String = HostConfiguration.machineId()
    ) {
        self.manifestsFolder = manifestsFolder
        self.listenHost = listenHost
        self.listenPort = listenPort
        self.socketPath = socketPath
        self.pluginSearchPath = pluginSearchPath
        self.limits = limits
        self.responseTimeout = responseTimeout
        self.drainTimeout = drainTimeout
        self.launchDataLimit = launchDataLimit
        self.launchPolicy = launchPolicy
        self.hostName = hostName
        self.hostId = hostId
    }

    /// `$XDG_RUNTIME_DIR/atrium/atriumd.sock`, or `/tmp/atrium-<uid>/atriumd.sock` without it.
    public static func defaultSocketPath() -> String {
        let environment = ProcessInfo.processInfo.environment
        if let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty {
            return runtime + "/atrium/atriumd.sock"
        }
        return "/tmp/atrium-\(getuid())/atriumd.sock"
    }

    /// The folder of the running executable, where `swift build` puts the plugin libraries.
    public static func executableFolder() -> URL {
        let path =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: path).deletingLastPathComponent()
    }

    /// `/etc/machine-id` when there is one, so that the id is stable across restarts.
    public static func machineId() -> String {
        if let text = try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8) {
            let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
            if !id.isEmpty { return id }
        }
        return UUID().uuidString.lowercased()
    }
}
