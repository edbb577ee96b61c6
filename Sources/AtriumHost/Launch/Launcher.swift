import AtriumProtocol
package import AtriumValues
import Dispatch
import Foundation
import Logging
import NIOPosix
import Synchronization

/// A launch as a client (or a plugin) asked for it.
struct LaunchRequestInfo: Sendable {
    var uri: String
    var package: String?
    var fallbackUri: String?
    var preferredPackages: [String]
    var data: [UInt8]?
}

/// The answer to a launch: a status and, when it is not success, why.
package struct LaunchOutcome: Sendable {
    package var status: RemoteLaunchUriStatus
    package var error: String?
}

/// Where launches run (CONTRACT section 5): checks a URI and the launch policy, finds the
/// handler of its scheme in the registry's snapshot (a program, a plugin, or the desktop's own
/// handlers), falls back to `fallbackUri`, and waits for the handler's answer, on a few
/// threads of its own so that handlers that take a while never hold an event loop. It counts
/// the launches in flight, from clients and plugins together, against `--max-launches`.
/// Thread-safe.
package final class Launcher: Sendable {
    let configuration: HostConfiguration
    let admission: AdmissionLimits
    let registry: PackageRegistry
    let logger: Logger
    let breaches: BreachLog
    let metrics: HostMetrics?
    /// Where launches run: a few threads of their own, so that handlers that take a while
    /// (a program started with `wait`) never hold an event loop or Dispatch's shared pool.
    let pool: NIOThreadPool
    /// Launches in flight, from clients and plugins together (at most `admission.maxLaunches`).
    let inFlight = Atomic<Int>(0)

    init(
        configuration: HostConfiguration, registry: PackageRegistry, logger: Logger, breaches: BreachLog,
        metrics: HostMetrics?
    ) {
        self.configuration = configuration
        admission = configuration.admission
        self.registry = registry
        self.logger = logger
        self.breaches = breaches
        self.metrics = metrics
        pool = NIOThreadPool(numberOfThreads: min(max(configuration.admission.maxLaunches, 1), 16))
        pool.start()
    }

    var policy: LaunchPolicy { configuration.launchPolicy }

    /// Takes one of the launch slots; false when `--max-launches` are in flight.
    func takeSlot() -> Bool {
        let limit = admission.maxLaunches
        var current = inFlight.load(ordering: .relaxed)
        while current < limit {
            let (exchanged, original) = inFlight.compareExchange(
                expected: current, desired: current + 1, ordering: .acquiringAndReleasing)
            if exchanged { return true }
            current = original
        }
        return false
    }

    func releaseSlot() {
        inFlight.wrappingSubtract(1, ordering: .acquiringAndReleasing)
    }

    /// The scheme of `uri` (RFC 3986: what comes before the first ':'), lowercased, when it has
    /// a valid one.
    static func scheme(of uri: String) -> String? {
        guard let colon = uri.utf8.firstIndex(of: UInt8(ascii: ":")) else { return nil }
        let scheme = String(uri[..<colon])
        return Manifest.isScheme(scheme) ? scheme.lowercased() : nil
    }

    /// The scheme of `uri` when a manifest declares it, else nil: what counts and logs may be
    /// labelled with (a bounded set), never a client's text.
    func declaredScheme(of uri: String) -> String? {
        Self.scheme(of: uri).flatMap { scheme in
            registry.packages.contains { $0.manifest.schemes.contains(scheme) } ? scheme : nil
        }
    }

    /// Launches a URI: checks it and the policy, finds the handler of its scheme (falling back
    /// to `fallbackUri`), and hands it the launch. Blocks while the handler runs: call it off
    /// the event loop. Every outcome is logged with who asked.
    func launch(_ request: LaunchRequestInfo, clientId: String, clientDescription: String, isRemote: Bool)
        -> LaunchOutcome
    {
        let outcome = checkedLaunch(request, clientId: clientId, isRemote: isRemote)
        let level: Logger.Level = outcome.status == .deniedByRemoteSystem ? .warning : .info
        let line = "launch \(untrusted(request.uri)) from \(clientDescription): \(outcome.status)"
        let metadata: Logger.Metadata = outcome.error.map { ["reason": "\(untrusted($0, limit: 300))"] } ?? [:]
        // Launches are counted per declared scheme and status (a bounded set): a client's
        // scheme is not a label, nor a kind of refusal of its own.
        let scheme = declaredScheme(of: request.uri)
        metrics?.launched(scheme: scheme, status: outcome.status)
        if outcome.status == .success {
            logger.log(level: level, "\(line)", metadata: metadata)
        } else {
            // A flood of one kind is one line per interval, and it does not hide a refusal of
            // another kind.
            // The status by name: a plugin's out-of-range number is "unrecognised", one kind.
            let kind = "launch \(scheme ?? "(undeclared scheme)") \(HostMetrics.name(outcome.status))"
            // A breach is a policy or a limit the client ran into; no handler for a scheme,
            // or a handler that failed, is an ordinary outcome.
            let isBreach = [.deniedByRemoteSystem, .deniedByLocalSystem, .valueSetTooLarge].contains(outcome.status)
            breaches.record(kind, level: level, line, metadata: metadata, isBreach: isBreach)
        }
        return outcome
    }

    private func checkedLaunch(_ request: LaunchRequestInfo, clientId: String, isRemote: Bool) -> LaunchOutcome {
        if let data = request.data {
            guard data.count <= configuration.launchDataLimit else {
                return LaunchOutcome(
                    status: .valueSetTooLarge,
                    error: "the launch data is \(data.count) bytes, over the limit of \(configuration.launchDataLimit)"
                )
            }
            let maxValues = admission.maxMessageValues
            let checked = data.withUnsafeBytes { raw in
                Result { () throws(ValueSetError) in
                    try ValueSet.validate(cbor: raw, maxValues: maxValues, root: "data")
                }
            }
            if case .failure(let error) = checked {
                return LaunchOutcome(status: .unknown, error: "the launch data is not a ValueSet: \(error)")
            }
        }
        let outcome = launchOne(request.uri, request, clientId: clientId, isRemote: isRemote)
        guard outcome.status == .protocolUnavailable, let fallback = request.fallbackUri else { return outcome }
        guard let scheme = Self.scheme(of: fallback), scheme == "http" || scheme == "https" else {
            return LaunchOutcome(
                status: .protocolUnavailable,
                error:
                    "\(outcome.error ?? "no handler"); the fallback \(untrusted(fallback)) is not an http or https URI"
            )
        }
        logger.info("launch \(untrusted(request.uri)): trying the fallback \(untrusted(fallback))")
        return launchOne(fallback, request, clientId: clientId, isRemote: isRemote)
    }

    /// `uri` with its scheme (`scheme`, which ``checkURI(_:maxLength:)`` found and lowercased)
    /// in place of the one it was sent with.
    static func lowercasingScheme(of uri: String, _ scheme: String) -> String {
        guard let colon = uri.utf8.firstIndex(of: UInt8(ascii: ":")) else { return uri }
        return scheme + uri[colon...]
    }

    /// The scheme of `uri` (lowercased) when the URI may be launched at all, or the refusal:
    /// longer than `maxLength` characters (7), no valid scheme (3), or characters a URI must
    /// not hold (3). Whatever the text, the cost is linear in its length and nothing traps.
    package static func checkURI(_ uri: String, maxLength: Int) -> Result<String, LaunchOutcomeError> {
        // Counting characters is linear but not cheap: bytes bound it first.
        let length = uri.utf8.count / 4 > maxLength ? uri.utf8.count : uri.count
        guard length <= maxLength else {
            return .failure(
                LaunchOutcomeError(
                    LaunchOutcome(
                        status: .deniedByRemoteSystem,
                        error: "the URI is \(length) characters long; the limit is \(maxLength)")))
        }
        guard let scheme = scheme(of: uri) else {
            return .failure(
                LaunchOutcomeError(
                    LaunchOutcome(
                        status: .protocolUnavailable,
                        error:
                            "\"\(untrusted(uri))\" is not a URI with a valid scheme (RFC 3986: a letter, then letters, digits, +, - or ., then ':')"
                    )))
        }
        if let refusal = uriCharacterRefusal(uri) {
            return .failure(LaunchOutcomeError(LaunchOutcome(status: .protocolUnavailable, error: refusal)))
        }
        return .success(scheme)
    }

    /// Checks one URI against the syntax, the length limit and the policy, then resolves and runs
    /// its handler.
    private func launchOne(_ uri: String, _ request: LaunchRequestInfo, clientId: String, isRemote: Bool)
        -> LaunchOutcome
    {
        let scheme: String
        switch Self.checkURI(uri, maxLength: policy.maxURILength) {
        case .success(let valid): scheme = valid
        case .failure(let refused): return refused.outcome
        }
        // Schemes are compared without case (RFC 3986, 3.1), so handlers get the scheme as the
        // manifests write it, lowercased, and the rest as sent: `NOTES://a` reaches notes as
        // `notes://a`.
        let uri = Self.lowercasingScheme(of: uri, scheme)
        let handlers = registry.packages.filter { $0.manifest.schemes.contains(scheme) }
        let toDesktop = handlers.isEmpty && request.package == nil && policy.systemHandlers
        // The policy decides what may run; a scheme nothing handles is ProtocolUnavailable (and
        // may fall back) whoever asks.
        if isRemote, !handlers.isEmpty || toDesktop,
            let refusal = policy.refusal(of: scheme, declared: !handlers.isEmpty)
        {
            return LaunchOutcome(status: .deniedByRemoteSystem, error: refusal)
        }
        if toDesktop {
            return SystemHandlers.launch(uri: uri, scheme: scheme, logger: logger, maxRunning: admission.maxLaunches)
        }
        let chosen: LoadedPackage
        switch choose(among: handlers, scheme: scheme, request: request) {
        case .success(let package): chosen = package
        case .failure(let refused): return refused.outcome
        }
        // As for open: a remote client is not told about the host's files (a plugin that did
        // not load, a program that did not start); the log has it all.
        if let exec = chosen.manifest.launch {
            var logger = self.logger
            logger[metadataKey: "package"] = "\(chosen.manifest.package)"
            var outcome = exec.run(uri: uri, logger: logger, maxRunning: admission.maxLaunches)
            if isRemote, outcome.status == .appUnavailable {
                logger.warning("launch for a remote client: \(outcome.error ?? "the program did not start")")
                outcome.error =
                    "package \"\(chosen.manifest.package)\" could not start its program (the host's log says why)"
            }
            return outcome
        }
        guard let backend = chosen.backend, backend.health.state != .failed else {
            let refusal = Router.unavailable(
                chosen.manifest.package, chosen.backend?.health.reason ?? chosen.loadError ?? "it has no plugin")
            return LaunchOutcome(status: .appUnavailable, error: refusal.told(isRemote: isRemote))
        }
        return wait(
            for: backend, LaunchInfo(uri: uri, data: request.data, clientId: clientId, isRemote: isRemote))
    }

    /// Hands a launch to a backend and waits for its answer (blocking the calling thread,
    /// which is never an event loop), at most the response timeout: a backend that does not
    /// answer, or a cycle of plugins launching each other's schemes, ends there.
    private func wait(for backend: any ServiceBackend, _ info: LaunchInfo) -> LaunchOutcome {
        let answer = Mutex<LaunchOutcome?>(nil)
        let done = DispatchSemaphore(value: 0)
        backend.launch(info) { outcome in
            answer.withLock { $0 = $0 ?? outcome }
            done.signal()
        }
        let timeout = configuration.responseTimeout
        guard done.wait(timeout: .now() + timeout.seconds) == .success, let outcome = answer.withLock({ $0 }) else {
            return LaunchOutcome(
                status: .unknown,
                error: "package \"\(backend.package)\" did not answer the launch within \(describe(timeout))")
        }
        return outcome
    }

    /// The resolution order of docs/LAUNCHING.md: the targeted package; else the first
    /// installed preferred one; else the only one; else the configured default; else the first
    /// in manifest order. The log says why.
    private func choose(among handlers: [LoadedPackage], scheme: String, request: LaunchRequestInfo)
        -> Result<LoadedPackage, LaunchOutcomeError>
    {
        if let target = request.package {
            guard let package = handlers.first(where: { $0.manifest.package == target }) else {
                let why = registry.package(target) == nil ? "is not installed" : "does not handle the scheme \(scheme)"
                return .failure(
                    LaunchOutcomeError(LaunchOutcome(status: .appUnavailable, error: "package \"\(target)\" \(why)")))
            }
            return .success(package)
        }
        guard let first = handlers.first else {
            return .failure(
                LaunchOutcomeError(
                    LaunchOutcome(status: .protocolUnavailable, error: "no package handles the scheme \(scheme)"))
            )
        }
        for name in request.preferredPackages {
            if let preferred = handlers.first(where: { $0.manifest.package == name }) {
                logger.info(
                    "launch \(scheme): chose \(name), the first of the client's preferred packages that handles it")
                return .success(preferred)
            }
        }
        if handlers.count == 1 { return .success(first) }
        let names = handlers.map(\.manifest.package).joined(separator: ", ")
        if let configured = policy.defaults[scheme],
            let package = handlers.first(where: { $0.manifest.package == configured })
        {
            logger.info("launch \(scheme): chose \(configured), the host's default for the scheme (handlers: \(names))")
            return .success(package)
        }
        logger.info(
            "launch \(scheme): chose \(first.manifest.package), the first in manifest order (handlers: \(names))")
        return .success(first)
    }
}

/// A launch refused, carrying the answer.
package struct LaunchOutcomeError: Error {
    package var outcome: LaunchOutcome
    init(_ outcome: LaunchOutcome) { self.outcome = outcome }
}
