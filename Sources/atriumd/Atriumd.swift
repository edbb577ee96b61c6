public import ArgumentParser
import AtriumDiscovery
import AtriumHost
import AtriumProtocol
import Foundation
public import Logging
import ServiceLifecycle

@main
struct Atriumd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "atriumd",
        abstract: "The Atrium host: serves app services from plugins to clients on this machine and others.",
        discussion: """
            atriumd reads the package manifests in a folder (one JSON file per package), loads \
            each package's plugin library, and serves its app services to clients over TCP \
            (remote clients) and a Unix domain socket (local clients). SIGTERM or SIGINT shuts \
            it down gracefully: requests in flight are answered, channels closed, plugins told.

            Examples:
              atriumd                        # the standard manifests folders, port 7340
              atriumd --manifests manifests  # the reference services, from the source
              atriumd --listen 0.0.0.0:7340  # clients from the network, over TLS only
              atriumd --listen 127.0.0.1:0   # any free port; the one bound is printed
              atriumd --check --manifests ~/my-services   # what would load, and why not
              atriumd --metrics 127.0.0.1:9340            # Prometheus, at /metrics
              atriumd --print-config         # the settings, and where each comes from
              atriumd token create --name backup   # a token for a script (token --help)
            """,
        version: AtriumVersion.current,
        subcommands: [TokenCommand.self]
    )

    @Option(
        help: ArgumentHelp(
            "A folder of package manifests (repeatable: read in order; a file in an earlier folder takes the place of one of the same name in a later one). Default: /etc/atrium/manifests.d, /usr/share/atrium/manifests and the user's $XDG_DATA_HOME/atrium/manifests (~/.local/share/atrium/manifests): those that exist.",
            valueName: "dir"))
    var manifests: [String] = []

    @Option(
        help: ArgumentHelp("The TCP address to listen on, or 'off'. Port 0 picks a free port.", valueName: "host:port"))
    var listen: String = "127.0.0.1:7340"

    @Option(
        help: ArgumentHelp(
            "Serve metrics in Prometheus's text format at http://HOST:PORT/metrics (for example 127.0.0.1:9340), or 'off'. Plain HTTP, no authentication: keep it on loopback, or on an address only your monitoring reaches.",
            valueName: "host:port"))
    var metrics: String = "off"

    @Option(
        help: ArgumentHelp(
            "TLS on the TCP listener: auto (only TLS on an address other than loopback; TLS or plain TCP on loopback), required (only TLS), or optional (TLS or plain TCP anywhere; logged loudly, since plain TCP off loopback can be read by anyone on the network).",
            valueName: "mode"))
    var tls: TLSMode = .auto

    @Option(
        help: ArgumentHelp(
            "Write an audit log to FILE: one JSON object per line for every pairing, revocation, open, launch, token use and refused local client, with the device's identity and address (mode 0600).",
            valueName: "file"))
    var auditLog: String?

    @Option(
        help: ArgumentHelp(
            "A group whose members may use the local socket too (the socket is then mode 0660, that group's; its folder must let them in). Default: only the host's user (and root).",
            valueName: "group"))
    var socketGroup: String?

    @Option(
        help: ArgumentHelp(
            "Whether TCP clients must be paired devices: auto (when listening on an address other than loopback), required, or off. Local clients never pair.",
            valueName: "mode"))
    var pairing: PairingMode = .auto

    @Option(
        help: ArgumentHelp(
            "Advertise the host on the local network with DNS-SD (_atrium._tcp, through avahi-daemon): on, or off. Nothing is advertised while the TCP listener is on loopback only.",
            valueName: "on|off"))
    var advertise: AdvertiseMode = .on

    @Option(
        help: ArgumentHelp(
            "The name the host is advertised under. Default: the machine's pretty hostname (hostnamectl set-hostname --pretty), read again on SIGHUP.",
            valueName: "name"))
    var advertiseName: String?

    @Option(
        help: ArgumentHelp(
            "What kind of machine this is, for clients that filter by it: \(MachineKind.all.joined(separator: ", ")). Default: found as hostnamectl does (CHASSIS in /etc/machine-info, then the firmware).",
            valueName: "kind"))
    var kind: String?

    @Option(help: ArgumentHelp("Seconds a pairing request waits for the operator.", valueName: "seconds"))
    var pairingTimeout: Double = 120

    @OptionGroup var state: StateOptions

    @OptionGroup(title: "Transfers") var transfers: TransferOptions

    @OptionGroup var configFile: ConfigOptions

    @Flag(
        help:
            "Print the configuration atriumd would run with: every option, its value and where it came from (the command line, an ATRIUM_* variable, the file and its line, or the default), as a configuration file; then exit."
    )
    var printConfig = false

    @Option(help: ArgumentHelp("The Unix domain socket for local clients, or 'off'.", valueName: "path"))
    var socket: String = HostConfiguration.defaultSocketPath()

    @Option(
        name: .customLong("plugin-path"),
        help: ArgumentHelp(
            "A folder to look for plugin libraries in, after the manifest's own folder (repeatable). Default: the folder of atriumd, then lib/atrium/plugins beside its bin folder (where an install puts them).",
            valueName: "dir"
        )
    )
    var pluginPath: [String] = []

    @Option(help: "The log level: trace, debug, info, notice, warning, error or critical.")
    var logLevel: Logger.Level = .info

    @Option(
        help: ArgumentHelp(
            "How the log is written: text, json (one object per line, for log shippers), journal (systemd's native fields: PACKAGE, CLIENT, STATUS, ...), or auto (journal when standard error is the journal, as under systemd; text otherwise).",
            valueName: "format"))
    var logFormat: LogFormat = .auto

    /// Where `--log-format journal` sends (the tests' stand-in for the journal).
    @Option(help: .private)
    var journalSocket: String = LogFormat.journalSocket

    @Option(
        help: ArgumentHelp(
            "Seconds a plugin has to answer a request before the client gets status 2.", valueName: "seconds"))
    var responseTimeout: Double = 30

    @Option(help: ArgumentHelp("Seconds shutdown waits for requests in flight.", valueName: "seconds"))
    var drainTimeout: Double = 10

    @Option(help: "The largest request message, in bytes (larger ones get status 5).")
    var maxMessageBytes: Int = ProtocolLimits.default.maxMessageBytes

    @Option(help: "The hard limit on a frame, in bytes (a longer frame closes the connection).")
    var maxFrameBytes: Int = ProtocolLimits.default.maxFrameBytes

    @Option(help: "The most channels one connection may have open.")
    var maxChannels: Int = ProtocolLimits.default.maxChannels

    @Option(help: "The most unanswered requests one connection may have (the excess get status 2).")
    var maxInFlight: Int = ProtocolLimits.default.maxInFlight

    @Option(help: "The largest data a launch may carry, in bytes (larger is answered with status 5, ValueSetTooLarge).")
    var launchDataLimit: Int = 100 * 1024

    @Option(
        name: .customLong("allow-scheme"),
        help: ArgumentHelp(
            "A scheme remote clients may launch even if no manifest declares it, or a local-only one such as file (repeatable).",
            valueName: "scheme"))
    var allowSchemes: [String] = []

    @Option(
        name: .customLong("deny-scheme"),
        help: ArgumentHelp("A scheme remote clients may never launch (repeatable).", valueName: "scheme"))
    var denySchemes: [String] = []

    @Option(
        name: .customLong("scheme-default"),
        help: ArgumentHelp(
            "The package that handles a scheme several packages declare (repeatable).", valueName: "scheme=package"))
    var schemeDefaults: [String] = []

    @Option(
        help: ArgumentHelp(
            "A launch policy file: {\"allow\": [...], \"deny\": [...], \"defaults\": {...}, \"maxUriLength\": n, \"systemHandlers\": bool}.",
            valueName: "file"))
    var launchPolicy: String?

    @Option(help: "The longest URI a launch may carry, in characters.")
    var maxUriLength: Int?

    @Flag(
        help:
            "Send schemes no manifest declares to the desktop's default handler (mimeapps.list); remote clients still need --allow-scheme."
    )
    var systemHandlers = false

    @Option(
        help:
            "The most TCP connections at once (refused beyond, with an error frame); lowered at start if the descriptor limit cannot hold them. Local-socket clients are counted apart (at most 64)."
    )
    var maxConnections: Int = AdmissionLimits.default.maxConnections

    @Option(help: "The most TCP connections from one address at once (an IPv4 address, or an IPv6 /64).")
    var maxConnectionsPerPeer: Int = AdmissionLimits.default.maxConnectionsPerPeer

    @Option(help: ArgumentHelp("Seconds a new connection has to send hello.", valueName: "seconds"))
    var helloTimeout: Double = 10

    @Option(
        help: ArgumentHelp(
            "Seconds a connection may send no frame (with nothing in flight) before it is closed.",
            valueName: "seconds"))
    var idleTimeout: Double = 300

    @Option(
        help:
            "The largest first frame (hello), in bytes: what a client that has not said hello can make the host buffer."
    )
    var maxHelloBytes: Int = AdmissionLimits.default.maxHelloBytes

    @Option(
        help: "Unsent bytes per connection past which the host stops reading it until the client reads (backpressure).")
    var maxUnsentBytes: Int = AdmissionLimits.default.outputHighWaterBytes

    @Option(help: "The most bytes of request messages one connection may have in flight (the excess get status 2).")
    var maxInFlightBytes: Int = AdmissionLimits.default.maxInFlightBytes

    @Option(
        help:
            "The most launches in flight in all, and the most programs started for launches running at once (the excess get status 7)."
    )
    var maxLaunches: Int = AdmissionLimits.default.maxLaunches

    @Option(help: "The most launches in flight per connection (the excess get status 7).")
    var maxLaunchesPerConnection: Int = AdmissionLimits.default.maxLaunchesPerConnection

    @Option(help: "The most requests that may wait for one plugin to take them (the excess get status 2).")
    var maxQueuedPerService: Int = AdmissionLimits.default.maxQueuedPerService

    @Option(help: "The most values (at every level) one message may hold (more gets status 5).")
    var maxMessageValues: Int = AdmissionLimits.default.maxMessageValues

    @Option(
        help: ArgumentHelp(
            "A file of tokens clients may send in hello, one per line (# for comments). With it, TCP clients must send one; without it, a client that sends a token is refused.",
            valueName: "file"))
    var tokenFile: String?

    @Flag(
        name: .customLong("no-strict-modes"),
        help:
            "Use manifests and plugin libraries even when other users could have written them (by default they must belong to root or this user and not be group- or world-writable)."
    )
    var noStrictModes = false

    @Flag(
        name: .customLong("no-watch"),
        help:
            "Do not reload the manifests when their folder changes (SIGHUP still reloads them). Reloading adds new packages, removes deleted ones and restarts changed ones without dropping a connection; a manifest that no longer passes leaves its package running as it was."
    )
    var noWatch = false

    @Flag(
        help:
            "Validate the manifests folder, print what would load, and exit (1 if anything would not). Loads each plugin library to check its ABI, which runs the library's initialisers; add --no-load to check without loading."
    )
    var check = false

    @Flag(help: .private)
    var worker = false

    @Option(help: .private)
    var workerLinks = 1

    @Flag(help: "With --check: check manifests and files only, without loading any plugin library.")
    var noLoad = false

    func validate() throws {
        if listen != "off" {
            _ = try parseListen()
        }
        if metrics != "off" {
            _ = try parseAddress(metrics, option: "--metrics", example: "127.0.0.1:9340")
            guard !metrics.hasPrefix(":") else {
                throw ValidationError(
                    "--metrics takes HOST:PORT with the host named (127.0.0.1:9340 for this machine only, 0.0.0.0:9340 for every address); got '\(metrics)'"
                )
            }
        }
        guard responseTimeout > 0, drainTimeout >= 0 else {
            throw ValidationError("--response-timeout must be above 0 and --drain-timeout at least 0")
        }
        _ = try makePolicy()
        guard maxMessageBytes > 0, maxFrameBytes >= maxMessageBytes, maxChannels > 0, maxInFlight > 0 else {
            throw ValidationError("limits must be positive, and --max-frame-bytes at least --max-message-bytes")
        }
        let positive = [
            ("--max-connections", maxConnections), ("--max-connections-per-peer", maxConnectionsPerPeer),
            ("--max-hello-bytes", maxHelloBytes), ("--max-unsent-bytes", maxUnsentBytes),
            ("--max-in-flight-bytes", maxInFlightBytes), ("--max-launches", maxLaunches),
            ("--max-launches-per-connection", maxLaunchesPerConnection), ("--max-message-values", maxMessageValues),
            ("--max-queued-per-service", maxQueuedPerService),
        ]
        for (flag, value) in positive where value <= 0 {
            throw ValidationError("\(flag) takes a positive number; got \(value)")
        }
        for (flag, seconds) in [
            ("--hello-timeout", helloTimeout), ("--idle-timeout", idleTimeout), ("--response-timeout", responseTimeout),
            ("--drain-timeout", drainTimeout), ("--pairing-timeout", pairingTimeout),
        ] where !(seconds.isFinite && seconds <= 86400 * 7) {
            throw ValidationError("\(flag) takes a number of seconds up to a week; got \(seconds)")
        }
        guard helloTimeout > 0, idleTimeout > 0 else {
            throw ValidationError("--hello-timeout and --idle-timeout take a positive number of seconds")
        }
        guard pairingTimeout > 0 else { throw ValidationError("--pairing-timeout takes a positive number of seconds") }
        if noLoad && !check { throw ValidationError("--no-load goes with --check") }
        if let kind, !MachineKind.isValid(kind) {
            throw ValidationError("--kind takes one of \(MachineKind.all.joined(separator: ", ")); got '\(kind)'")
        }
        if let advertiseName,
            advertiseName.trimmingCharacters(in: .whitespaces).isEmpty || advertiseName.contains(where: \.isNewline)
        {
            throw ValidationError("--advertise-name takes a name of one line, not empty")
        }
        if let socketGroup, getgrnam(socketGroup) == nil {
            throw ValidationError("--socket-group \(socketGroup): there is no such group on this machine")
        }
        _ = try readTokens()
    }

    /// The tokens of --token-file, or nil without one.
    func readTokens() throws -> Set<String>? {
        guard let tokenFile else { return nil }
        let text: String
        do {
            text = try String(contentsOfFile: tokenFile, encoding: .utf8)
        } catch {
            throw ValidationError("--token-file \(tokenFile): cannot read it (\(error.localizedDescription))")
        }
        let tokens = text.split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
        guard !tokens.isEmpty else {
            throw ValidationError("--token-file \(tokenFile) holds no tokens (one per line; # starts a comment)")
        }
        if let short = tokens.first(where: { $0.utf8.count < 16 }) {
            throw ValidationError(
                "--token-file \(tokenFile): a token of \(short.utf8.count) characters is too easy to guess; use at least 16 (for example: openssl rand -hex 16)"
            )
        }
        return Set(tokens)
    }

    func parseListen() throws -> (String, Int) {
        try parseAddress(listen, option: "--listen", example: "127.0.0.1:7340 or 0.0.0.0:0")
    }

    func parseAddress(_ address: String, option: String, example: String) throws -> (String, Int) {
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]),
            (0...65535).contains(port)
        else {
            throw ValidationError("\(option) takes HOST:PORT (for example \(example)), or 'off'; got '\(address)'")
        }
        var host = String(address[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host.isEmpty ? "0.0.0.0" : host, port)
    }

    func makePolicy() throws -> LaunchPolicy {
        var policy = LaunchPolicy()
        if let file = launchPolicy {
            do {
                policy = try LaunchPolicy.load(URL(fileURLWithPath: file))
            } catch {
                throw ValidationError("--launch-policy \(file): \(error)")
            }
        }
        var defaults: [String: String] = [:]
        for pair in schemeDefaults {
            guard let equals = pair.firstIndex(of: "="), equals != pair.startIndex,
                pair.index(after: equals) != pair.endIndex
            else {
                throw ValidationError(
                    "--scheme-default takes SCHEME=PACKAGE (for example https=org.mozilla.firefox); got '\(pair)'")
            }
            defaults[String(pair[..<equals])] = String(pair[pair.index(after: equals)...])
        }
        for scheme in allowSchemes + denySchemes + Array(defaults.keys) where !Manifest.isScheme(scheme) {
            throw ValidationError("'\(scheme)' is not a URI scheme (a letter, then letters, digits, +, - or .)")
        }
        policy = policy.merging(allowed: allowSchemes, denied: denySchemes, defaults: defaults)
        if let maxUriLength {
            guard maxUriLength > 0 else { throw ValidationError("--max-uri-length takes a positive number") }
            policy.maxURILength = maxUriLength
        }
        if systemHandlers { policy.systemHandlers = true }
        return policy
    }

    func makeConfiguration() throws -> HostConfiguration {
        let listenAddress = listen == "off" ? nil : try parseListen()
        return HostConfiguration(
            manifestFolders: manifests.isEmpty
                ? HostConfiguration.standardManifestFolders() : manifests.map { URL(fileURLWithPath: $0) },
            listenHost: listenAddress?.0,
            listenPort: listenAddress?.1 ?? 0,
            socketPath: socket == "off" ? nil : socket,
            pluginSearchPath: pluginPath.isEmpty
                ? HostConfiguration.defaultPluginSearchPath() : pluginPath.map { URL(fileURLWithPath: $0) },
            limits: ProtocolLimits(
                maxMessageBytes: maxMessageBytes, maxFrameBytes: maxFrameBytes, maxChannels: maxChannels,
                maxInFlight: maxInFlight
            ),
            responseTimeout: .milliseconds(Int64(responseTimeout * 1000)),
            drainTimeout: .milliseconds(Int64(drainTimeout * 1000)),
            launchDataLimit: launchDataLimit,
            launchPolicy: try makePolicy(),
            admission: AdmissionLimits(
                maxConnections: maxConnections,
                maxConnectionsPerPeer: maxConnectionsPerPeer,
                helloTimeout: .milliseconds(Int64(helloTimeout * 1000)),
                idleTimeout: .milliseconds(Int64(idleTimeout * 1000)),
                maxHelloBytes: maxHelloBytes,
                outputHighWaterBytes: maxUnsentBytes,
                outputLowWaterBytes: max(1, maxUnsentBytes / 4),
                maxInFlightBytes: maxInFlightBytes,
                maxLaunches: maxLaunches,
                maxLaunchesPerConnection: maxLaunchesPerConnection,
                maxQueuedPerService: maxQueuedPerService,
                maxMessageValues: maxMessageValues
            ),
            tokens: try readTokens(),
            strictModes: !noStrictModes
        )
    }

    func run() async throws {
        let level = logLevel
        let format = logFormat == .auto ? LogFormat.detected() : logFormat
        let journal = journalSocket
        LoggingSystem.bootstrap { label in
            switch format {
            case .json:
                var handler = JSONLogHandler(label: label)
                handler.logLevel = level
                return handler
            case .journal:
                var handler = JournalLogHandler(label: label, socket: journal)
                handler.logLevel = level
                return handler
            case .auto, .text:
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = level
                return handler
            }
        }
        if worker {
            // A package's worker process (`"isolation": "process"`), started by atriumd itself.
            Foundation.exit(WorkerMain.run(links: workerLinks, logger: Logger(label: "atriumd.worker")))
        }
        let logger = Logger(label: "atriumd")
        for variable in Self.configuredElsewhere.withLock({ $0?.unusedEnvironment ?? [] }) {
            logger.notice("\(variable) names no option of atriumd's and is not used")
        }
        // Under systemd: the sockets of a socket unit, and where to say the host is ready.
        let activated: [Systemd.ActivatedSocket]
        do {
            activated = try Systemd.takeActivatedSockets()
        } catch {
            throw ValidationError(error.description)
        }
        var configuration = try makeConfiguration()
        configuration.activatedSockets = activated
        configuration.notifier = Systemd.Notifier.fromEnvironment()
        if !activated.isEmpty {
            // The sockets of the unit are all the host listens on: a kind it did not pass is
            // off, unless named on the command line.
            if !activated.contains(where: \.isTCP), !Self.isGiven("listen") { configuration.listenHost = nil }
            if !activated.contains(where: { !$0.isTCP }), !Self.isGiven("socket") { configuration.socketPath = nil }
        }
        for socket in activated {
            // What they are bound to decides what listening there means (TLS, pairing,
            // advertising), as --listen and --socket would.
            switch socket.kind {
            case .tcp(let address, let port):
                configuration.listenHost = address
                configuration.listenPort = port
            case .unix(let path):
                configuration.socketPath = path
            }
        }
        configuration.skipMissingManifestFolders = manifests.isEmpty
        if metrics != "off" {
            (configuration.metricsHost, configuration.metricsPort) = try parseAddress(
                metrics, option: "--metrics", example: "127.0.0.1:9340")
        }
        configuration.workerExecutable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        configuration.watchManifests = !noWatch
        configuration.tls = tls
        configuration.pairing = pairing
        configuration.advertise = advertise == .on
        configuration.advertisedName = advertiseName
        if let kind { configuration.kind = kind }
        configuration.socketGroup = socketGroup
        configuration.auditLog = auditLog.map { URL(fileURLWithPath: $0) }
        configuration.pairingTimeout = .milliseconds(Int64(pairingTimeout * 1000))
        if let folder = state.stateFolder { configuration.stateFolder = folder }
        configuration.transferLimits = transfers.limits
        configuration.transferFolder = transfers.transferDir.map { URL(fileURLWithPath: $0) }

        if check {
            try runCheck(configuration)
            return
        }

        let server: AtriumServer
        do {
            server = try AtriumServer(configuration: configuration, logger: logger) { addresses in
                if let tcp = addresses.tcp, let port = tcp.port {
                    say("listening on tcp \(tcp.ipAddress ?? "?"):\(port)")
                }
                if let path = addresses.unixSocket { say("listening on unix \(path)") }
                if let metrics = addresses.metrics, let port = metrics.port {
                    let host = metrics.ipAddress.map { $0.contains(":") ? "[\($0)]" : $0 } ?? "?"
                    say("metrics on http://\(host):\(port)/metrics")
                }
                say("ready")
            }
        } catch let error as ManifestError {
            throw ValidationError("\(error)")
        }
        for problem in server.manifests.problems { say("manifest skipped: \(problem)") }
        for package in server.packages {
            let name = "\(package.manifest.package) (\(package.manifest.displayName))"
            if let error = package.loadError {
                say("package \(name) is listed but not available: \(error)")
            } else {
                let services = package.manifest.services.map(\.name).joined(separator: ", ")
                say("loaded \(name)" + (services.isEmpty ? "" : ": \(services)"))
            }
        }
        let group = ServiceGroup(
            configuration: .init(services: [server], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        )
        try await group.run()
    }

    func runCheck(_ configuration: HostConfiguration) throws {
        let report: ManifestCheck
        do {
            report = try ManifestCheck.run(
                folders: configuration.manifestFolders, skipMissing: configuration.skipMissingManifestFolders,
                pluginSearchPath: configuration.pluginSearchPath, strictModes: configuration.strictModes,
                load: !noLoad)
        } catch {
            throw ValidationError("\(error)")
        }
        if report.folders.isEmpty {
            print(
                "no manifests folder: none of \(configuration.manifestFolders.map(\.path).joined(separator: ", ")) exists (--manifests names one)"
            )
        } else if configuration.manifestFolders.count > 1 {
            print("manifests from " + report.folders.map(\.path).joined(separator: ", "))
        }
        for entry in report.entries {
            if let first = entry.problems.first {
                print("✗ \(entry.file)\(entry.package.map { " (\($0))" } ?? ""): \(first)")
                for problem in entry.problems.dropFirst() { print("  ✗ \(problem)") }
            } else {
                print("✓ \(entry.file) (\(entry.package ?? "")): \(entry.summary)")
            }
            // Beside the failures too: a key misspelled is often why a manifest fails.
            for warning in entry.warnings { print("  ! \(warning)") }
        }
        for note in report.notes { print("- \(note)") }
        print(
            noLoad
                ? "(plugin libraries were found and checked, not loaded)"
                : "(plugin libraries were loaded to check their ABI, which runs their initialisers; --no-load skips that)"
        )
        let bad = report.entries.filter { $0.problem != nil }.count
        print("\(report.entries.count) manifests, \(report.entries.count - bad) would load, \(bad) would not")
        if bad > 0 { throw ExitCode(1) }
    }
}

/// A line on standard output, flushed at once (tests and scripts read it as it comes).
func say(_ line: String) {
    FileHandle.standardOutput.write(Data("atriumd: \(line)\n".utf8))
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
extension TLSMode: ExpressibleByArgument {}
extension LogFormat: ExpressibleByArgument {}
extension PairingMode: ExpressibleByArgument {}

/// `--advertise`.
enum AdvertiseMode: String, ExpressibleByArgument, CaseIterable {
    case on, off
}
