import AtriumProtocol
import AtriumTLS
import Foundation
public import Logging
public import NIOCore
import NIOPosix
import NIOSSL
public import ServiceLifecycle

/// The Atrium host as a `Service`: it loads the manifests and their plugins, listens on TCP
/// and on the local Unix socket, and runs until graceful shutdown (SIGTERM or SIGINT in
/// `atriumd`), when it stops taking connections, lets requests in flight finish (within the
/// drain timeout), closes every channel and tells the plugins.
public final class AtriumServer: Service, Sendable {
    /// Where the host is listening, once it is.
    public struct Addresses: Sendable {
        /// The TCP address actually bound (with the real port when 0 was asked for).
        public var tcp: SocketAddress?
        public var unixSocket: String?
        /// Where `--metrics` serves.
        public var metrics: SocketAddress?
    }

    public let core: HostCore
    /// The manifests read at start, with the problems found in them.
    public let manifests: ManifestDirectory
    let configuration: HostConfiguration
    let logger: Logger
    let group: any EventLoopGroup
    let onReady: @Sendable (Addresses) -> Void
    /// What the TCP listener accepts: TLS, plain TCP, or either.
    let transport: TransportPolicy

    /// Reads the manifests and loads their plugins. A bad manifest or plugin is logged and
    /// skipped; only an unreadable manifests folder throws.
    public init(
        configuration: HostConfiguration,
        logger: Logger,
        group: (any EventLoopGroup)? = nil,
        onReady: @escaping @Sendable (Addresses) -> Void = { _ in }
    ) throws {
        var configuration = configuration
        if let note = configuration.fitToDescriptorLimit() { logger.warning("\(note)") }
        self.configuration = configuration
        self.logger = logger
        self.group = group ?? MultiThreadedEventLoopGroup.singleton
        self.onReady = onReady
        // SIGHUP reloads the manifests once the host runs; until then it must not end it.
        signal(SIGHUP, SIG_IGN)
        // A write to a pipe whose reader is gone (a worker's link, a launch handler's input) is
        // an error to the writer, never the host's death. SwiftNIO ignores SIGPIPE too, but
        // only once it makes its first socket or pipe channel; a worker's link writes to its
        // pipe directly.
        signal(SIGPIPE, SIG_IGN)
        manifests = try ManifestDirectory.load(
            configuration.manifestFolders, skipMissing: configuration.skipMissingManifestFolders,
            strictModes: configuration.strictModes)
        if manifests.folders.isEmpty {
            logger.warning(
                "no manifests folder: none of \(configuration.manifestFolders.map(\.path).joined(separator: ", ")) exists; no package is served until one is made and the host reloads (SIGHUP)"
            )
        }
        for note in manifests.notes { logger.notice("\(note)") }
        for problem in manifests.problems {
            logger.error("manifest skipped: \(problem)")
        }
        for warning in manifests.warnings {
            logger.warning("\(warning)")
        }
        let (transport, identity) = try Self.transportPolicy(configuration, logger: logger)
        self.transport = transport
        let audit = try configuration.auditLog.map { file throws(HostStartError) in
            try AuditLog(file: file, interval: configuration.admission.breachLogInterval, logger: logger)
        }
        core = HostCore(
            configuration: configuration, logger: logger, group: self.group, identity: identity, audit: audit)
        if core.pairingRequired {
            if identity == nil {
                logger.error(
                    "TCP clients must pair, but the host serves no TLS: no TCP client can pair, and each is refused everything but ping"
                )
            } else {
                logger.info(
                    "TCP clients must be paired devices", metadata: ["paired": "\(core.devices.devices.count)"])
            }
        }
        core.registry.load(manifests, core: core)
    }

    /// Loads (or makes, at first start) the host's identity and decides what the TCP
    /// listener accepts. Without an identity the host serves plain TCP where that is allowed,
    /// and does not start where TLS is required.
    static func transportPolicy(_ configuration: HostConfiguration, logger: Logger) throws(HostStartError) -> (
        TransportPolicy, String?
    ) {
        guard let host = configuration.listenHost else { return (.plaintext, nil) }
        let address = "\(host):\(configuration.listenPort)"
        let loopback = configuration.listensOnLoopbackOnly
        let plaintextAllowed =
            switch configuration.tls {
            case .auto: loopback
            case .required: false
            case .optional: true
            }
        let identity: TLSIdentity
        let context: NIOSSLContext
        let httpContext: NIOSSLContext
        do {
            identity = try TLSIdentity.loadOrCreate(
                in: configuration.stateFolder, name: "host", commonName: "atriumd on \(configuration.hostName)")
            context = try identity.makeServerContext()
            httpContext = try identity.makeHTTPServerContext()
        } catch {
            guard plaintextAllowed else {
                throw HostStartError(
                    "TLS is required on \(address), but the host has no identity to serve it with: \(error) (--state-dir names the folder it is kept in)"
                )
            }
            logger.warning("the host serves no TLS, only plain TCP on \(address): \(error)")
            return (.plaintext, nil)
        }
        logger.info(
            "TLS identity \(identity.fingerprint)",
            metadata: ["key": "\(identity.keyFile.path)", "plain TCP": "\(plaintextAllowed ? "accepted" : "refused")"])
        if plaintextAllowed && !loopback {
            logger.warning(
                "PLAIN TCP IS ACCEPTED on \(address), which is not a loopback address (--tls optional): anyone on the network can read and change what a plain client sends and receives. Drop --tls optional to take only TLS there."
            )
        }
        return (
            TransportPolicy(context: context, httpContext: httpContext, plaintextAllowed: plaintextAllowed),
            identity.fingerprint
        )
    }

    /// The packages, with their load errors.
    public var packages: [LoadedPackage] { core.registry.packages }

    /// Reads the manifests folder again and brings the packages in line with it
    /// (``HostCore/reload(_:)``); logs what changed. An unreadable or unsafe folder changes
    /// nothing. Blocks while plugins load: call it off the event loops.
    @discardableResult
    public func reload(reason: String) -> ReloadReport? {
        let directory: ManifestDirectory
        do {
            directory = try ManifestDirectory.load(
                configuration.manifestFolders, skipMissing: configuration.skipMissingManifestFolders,
                strictModes: configuration.strictModes)
        } catch {
            logger.error("reload (\(reason)) skipped, every package stays as it was: \(error)")
            return nil
        }
        for problem in directory.problems { logger.error("manifest skipped: \(problem)") }
        for warning in directory.warnings { logger.warning("\(warning)") }
        for note in directory.notes { logger.notice("\(note)") }
        guard let report = core.registry.reload(directory, core: core) else {
            logger.notice("reload (\(reason)) skipped: the host is shutting down")
            return nil
        }
        logger.notice("manifests reloaded (\(reason)): \(report)")
        configuration.notifier?.status(servingStatus())
        // Transfers of a service their callers may no longer open go; uploads that waited for a
        // package that was not there go to it now.
        core.dropTransfersNoLongerOpenable()
        core.transfers.deliverWaiting()
        return report
    }

    /// What systemd shows beside the service (`systemctl status`): how many packages serve.
    func servingStatus() -> String {
        let packages = core.registry.packages
        let available = packages.filter { $0.backend != nil }.count
        let listening = core.listeners.withLock { $0 }.joined(separator: ", ")
        return "serving \(available) of \(packages.count) packages"
            + (listening.isEmpty ? "" : " on \(listening)")
    }

    public func run() async throws {
        var listeners: [any Channel] = []
        var addresses = Addresses()
        do {
            let activatedTCP = configuration.activatedSockets.first { $0.isTCP }
            let activatedUnix = configuration.activatedSockets.first { !$0.isTCP }
            if let activatedTCP {
                // Bound and listening already (socket activation): taken as it is.
                let channel = try await bootstrap(isLocal: false, transport: transport)
                    .withBoundSocket(activatedTCP.descriptor).get()
                listeners.append(channel)
                addresses.tcp = channel.localAddress
            } else if let host = configuration.listenHost {
                let channel = try await bootstrap(isLocal: false, transport: transport)
                    .bind(host: host, port: configuration.listenPort).get()
                listeners.append(channel)
                addresses.tcp = channel.localAddress
            }
            if let activatedUnix, case .unix(let path) = activatedUnix.kind {
                // Made by systemd, with the owner and mode its socket unit gives it.
                let channel = try await bootstrap(isLocal: true, transport: .plaintext)
                    .withBoundSocket(activatedUnix.descriptor).get()
                listeners.append(channel)
                addresses.unixSocket = path
            } else if let path = configuration.socketPath {
                try SocketFolder.prepare(for: path)
                // Only the host's own user may connect (local clients need no pairing): the
                // socket is made 0600 from the start, not changed to it after the bind.
                let previous = umask(0o077)
                let channel: any Channel
                do {
                    channel = try await bootstrap(isLocal: true, transport: .plaintext)
                        .bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true).get()
                    umask(previous)
                } catch {
                    umask(previous)
                    throw error
                }
                if let group = configuration.socketGroup {
                    // The group's members may connect too (each connection is still checked).
                    guard let entry = getgrnam(group), chown(path, uid_t.max, entry.pointee.gr_gid) == 0,
                        chmod(path, 0o660) == 0
                    else {
                        throw HostStartError(
                            "the local socket cannot be given to group \"\(group)\": \(String(cString: strerror(errno)))"
                        )
                    }
                } else {
                    chmod(path, 0o600)
                }
                listeners.append(channel)
                addresses.unixSocket = path
            }
            if let metrics = core.metrics, let host = configuration.metricsHost {
                let core = self.core
                let channel = try await MetricsEndpoint.start(
                    host: host, port: configuration.metricsPort, group: group, logger: logger
                ) { eventLoop in
                    metrics.scrape(on: eventLoop) { core.updateMetrics(metrics) }
                }
                listeners.append(channel)
                addresses.metrics = channel.localAddress
            }
        } catch {
            for listener in listeners { try? await listener.close() }
            throw error
        }
        logger.info(
            "listening",
            metadata: [
                "tcp": "\(addresses.tcp.map { "\($0)" } ?? "off")", "unix": "\(addresses.unixSocket ?? "off")",
                "metrics": "\(addresses.metrics.map { "\($0)" } ?? "off")",
            ]
        )
        if transport.context != nil, let tcp = addresses.tcp { core.httpsAddress.withLock { $0 = tcp } }
        core.listeners.withLock { listeners in
            listeners = []
            if let tcp = addresses.tcp, let port = tcp.port {
                let host = tcp.ipAddress.map { $0.contains(":") ? "[\($0)]" : $0 } ?? "?"
                listeners.append("tcp \(host):\(port)")
            }
            if let path = addresses.unixSocket { listeners.append("unix \(path)") }
        }
        // Found on the network (DNS-SD) once it can be reached there.
        let advertiser = makeAdvertiser(for: addresses.tcp)
        advertiser?.start()
        let advertisedScope = configuration.listenHost.map { Self.advertisingScope(of: $0) }
        // Counts of refusals that were not logged one by one go out once per interval.
        let breaches = core.breaches
        let audit = core.audit
        let flushes = group.next().scheduleRepeatedTask(
            initialDelay: TimeAmount(configuration.admission.breachLogInterval),
            delay: TimeAmount(configuration.admission.breachLogInterval)
        ) { _ in
            breaches.flush()
            audit?.writeCounts()
        }

        let core = self.core
        let trims = group.next().scheduleRepeatedTask(initialDelay: .seconds(2), delay: .seconds(2)) { _ in
            core.trimMemoryAfterBursts()
        }
        // A token revoked (atriumd token revoke) while its connection is open is cut off
        // within a second.
        let tokenChecks = group.next().scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { _ in
            core.checkRevokedTokens()
        }
        // Transfers with no progress for their expiry expire, at start and every hour (a
        // quarter of the expiry when that is shorter, at least a second).
        let sweepEvery = TimeAmount.milliseconds(
            Int64(min(3600, max(1, configuration.transferLimits.expiry.seconds / 4)) * 1000))
        let sweeps = group.next().scheduleRepeatedTask(initialDelay: .zero, delay: sweepEvery) { _ in
            core.sweepTransfers()
        }

        // SIGHUP reloads the manifests, as does any change in their folder (unless watching
        // is off). Reloads run one at a time, off the event loops; those asked for while one
        // waits to start join it.
        let reloads = ReloadQueue { [self, addresses] reasons in
            reload(reason: reasons.joined(separator: " and "))
            // The machine's pretty hostname may have changed (hostnamectl set-hostname --pretty).
            if reasons.contains("SIGHUP"), let advertiser, let port = addresses.tcp?.port, let advertisedScope {
                advertiser.update(
                    advertisedService(port: port, interface: advertisedScope.interface, ipv6: advertisedScope.ipv6))
            }
        }
        var watcher: ManifestWatcher?
        if configuration.watchManifests {
            let logger = self.logger
            switch ManifestWatcher.start(
                folders: configuration.manifestFolders,
                problem: { problem in
                    logger.warning("changes in a manifests folder are not seen (it is reloaded on SIGHUP): \(problem)")
                },
                changed: {
                    reloads.request("the manifests folder changed")
                })
            {
            case .success(let started):
                watcher = started
                // Those it cannot watch were named above.
                let watched = configuration.manifestFolders.map(\.path).filter {
                    !started.unwatchableAtStart.contains($0)
                }
                if !watched.isEmpty {
                    logger.info(
                        "manifests are reloaded on a change in \(watched.joined(separator: ", ")), and on SIGHUP")
                }
            case .failure(let error):
                logger.warning("manifests are reloaded on SIGHUP only: \(error.reason)")
            }
        } else {
            logger.info("manifests are reloaded on SIGHUP only (no-watch is set)")
        }
        let watching = watcher
        signal(SIGHUP, SIG_IGN)
        let hangUps = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
        hangUps.setEventHandler {
            // A folder that could not be watched may be watchable now.
            watching?.rewatch()
            reloads.request("SIGHUP")
        }
        // The handler is in place only once the source is registered (libdispatch installs it
        // on a thread of its own after resume): until then a SIGHUP is ignored.
        await withCheckedContinuation { (registered: CheckedContinuation<Void, Never>) in
            hangUps.setRegistrationHandler { registered.resume() }
            hangUps.resume()
        }

        // Ready only now: from the moment the host says it is ready, a change in a manifests
        // folder or a SIGHUP (systemctl reload) reloads.
        onReady(addresses)
        if let notifier = configuration.notifier, !notifier.ready(status: servingStatus()) {
            logger.warning(
                "systemd could not be told the host is ready (NOTIFY_SOCKET \(notifier.path)); it will count the start as failed at its timeout"
            )
        }

        // Runs until graceful shutdown is triggered (or the task is cancelled).
        try? await gracefulShutdown()
        configuration.notifier?.stopping()
        // Withdrawn first: clients stop finding the host before it stops answering.
        advertiser?.stop()
        flushes.cancel()
        trims.cancel()
        tokenChecks.cancel()
        sweeps.cancel()
        hangUps.cancel()
        watcher?.stop()
        // A reload under way finishes before the shutdown takes the packages down; one
        // waiting to start does not start.
        reloads.stop()

        for listener in listeners { try? await listener.close() }
        await core.shutDown()
        core.audit?.flush()
        // A socket systemd made stays: it is systemd's, and listens for the next start.
        if let path = addresses.unixSocket, !configuration.activatedSockets.contains(where: { !$0.isTCP }) {
            try? FileManager.default.removeItem(atPath: path)
        }
    }

    private func bootstrap(isLocal: Bool, transport: TransportPolicy) -> ServerBootstrap {
        let core = self.core
        let logger = self.logger
        let admission = configuration.admission
        let gate = AdmissionGate(core: core, isLocal: isLocal)
        return ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: isLocal ? 0 : 1)
            // A client that shuts down its sending side still gets the answers it is owed.
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelOption(
                .writeBufferWaterMark,
                value: .init(low: admission.outputLowWaterBytes, high: admission.outputHighWaterBytes)
            )
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(gate) }
            }
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    guard let ticket = gate.ticket(for: channel) else { throw AdmissionGate.NotCounted() }
                    // With --metrics, bytes are counted where they are read and encoded.
                    let loopMetrics = core.metrics?.loopMetrics(on: channel.eventLoop)
                    if let loopMetrics {
                        try channel.pipeline.syncOperations.addHandler(ByteCountingHandler(loop: loopMetrics))
                    }
                    let security = ConnectionTransport()
                    security.listenerServesTLS = transport.context != nil
                    if transport.context != nil {
                        let sniffer = TransportSniffer(
                            policy: transport, transport: security, breaches: core.breaches, audit: core.audit,
                            loopMetrics: loopMetrics)
                        sniffer.becomeHTTP = { pipeline, position in
                            try TransferHTTP.install(in: pipeline, at: position, core: core, logger: logger)
                        }
                        try channel.pipeline.syncOperations.addHandler(sniffer)
                    }
                    try channel.pipeline.syncOperations.addHandler(
                        ConnectionHandler(
                            core: core, isLocal: isLocal, ticket: ticket, transport: security,
                            loopMetrics: loopMetrics, logger: logger))
                }
            }
    }
}

/// Why the host cannot start, in words for the operator.
public struct HostStartError: Error, Sendable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
