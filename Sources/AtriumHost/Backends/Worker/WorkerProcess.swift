import AtriumProtocol
import AtriumValues
import Dispatch
import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A package whose plugin runs in a worker process of its own (`"isolation": "process"`):
/// the host's side of the worker's socket. Calls on the seam become frames to the worker
/// (``WorkerFrame``); the worker's frames become calls on the host's side of the seam, checked
/// as any backend's are.
///
/// A worker that dies (a signal, an exit, its socket closing) takes only its own package's
/// work with it: the package's channels are closed with status Unknown, its requests in
/// flight are answered AppUnavailable (6), and the log names the package and the signal or
/// exit status. The host then starts a new worker after a delay that doubles with each crash
/// (0.25 s up to 30 s), and after ``maxCrashes`` crashes within ``crashWindow`` it gives the
/// package up: `open` answers AppUnavailable (2) with the reason until the host restarts.
final class WorkerProcess: ServiceBackend, Sendable {
    let package: String
    let library: URL
    private let manifest: Manifest
    private unowned let core: HostCore
    private let logger: Logger
    private let executable: URL
    private let group: any EventLoopGroup

    static let maxCrashes = 5
    /// Requests in a row that may time out, with no answer between them, before the worker
    /// is taken as hung.
    static let maxSilentTimeouts = 3
    static let crashWindow = Duration.seconds(60)

    private enum Phase {
        /// Started, `ready` not yet received; ``WorkerProcess/start()`` waits for it.
        case starting
        case running
        /// Down, a new worker due at the time set.
        case restarting(reason: String)
        /// Given up on, or shut down.
        case failed(reason: String)
    }

    private struct State {
        var phase = Phase.starting
        var channel: (any Channel)?
        var process: Process?
        /// Which start of the worker this is: frames and exits of an earlier one are ignored.
        var generation = 0
        var opens: [UInt64: @Sendable (AppServiceConnectionStatus) -> Void] = [:]
        var launches: [UInt64: @Sendable (LaunchOutcome) -> Void] = [:]
        var nextLaunch: UInt64 = 1
        var crashes: [ContinuousClock.Instant] = []
        var shuttingDown = false
        /// Requests timed out since the worker last answered one.
        var timeoutsSinceAnswer = 0
        /// Set when the host killed the worker for not answering: the reason it gives.
        var hungReason: String?
        var ready: DispatchSemaphore?
        var startError: String?
    }

    private let state = Mutex(State())

    init(manifest: Manifest, library: URL, executable: URL, core: HostCore, group: any EventLoopGroup, logger: Logger) {
        self.manifest = manifest
        package = manifest.package
        self.library = library
        self.executable = executable
        self.core = core
        self.group = group
        var logger = logger
        logger[metadataKey: "package"] = "\(manifest.package)"
        self.logger = logger
    }

    // MARK: Starting and losing the worker

    /// Starts the worker and waits for it to load the plugin (at most `timeout`).
    func start(timeout: Duration = .seconds(10)) throws(PluginLoadError) {
        let ready = DispatchSemaphore(value: 0)
        state.withLock { $0.ready = ready }
        if let error = launchWorker() { throw PluginLoadError(reason: error) }
        guard ready.wait(timeout: .now() + timeout.seconds) == .success else {
            kill()
            throw PluginLoadError(reason: "the worker process did not load the plugin within \(describe(timeout))")
        }
        if let error = state.withLock({ $0.startError }) {
            throw PluginLoadError(reason: error)
        }
    }

    /// Starts a worker process; returns why it could not.
    private func launchWorker() -> String? {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            return "cannot make a socket pair for the worker: errno \(errno)"
        }
        let (hostEnd, workerEnd) = (pair[0], pair[1])
        let process = Process()
        process.executableURL = executable
        process.arguments = ["--worker"]
        // glibc reserves 64 MiB of address space per thread's malloc arena: two arenas keep a
        // worker's address space, which its memory limit counts, near what it really uses.
        // Swift's crash backtracer would hold a crashed worker for a second or more while it
        // symbolicates (and delay the restart): it is off unless the host's environment
        // says otherwise (SWIFT_BACKTRACE=enable=yes to see where a plugin crashed).
        var environment = ProcessInfo.processInfo.environment
        environment["MALLOC_ARENA_MAX"] = "2"
        environment["SWIFT_BACKTRACE"] = environment["SWIFT_BACKTRACE"] ?? "enable=no"
        process.environment = environment
        // The worker's end becomes its standard input (dup2 clears close-on-exec on the copy).
        process.standardInput = FileHandle(fileDescriptor: workerEnd, closeOnDealloc: true)
        let generation = state.withLock { state -> Int in
            state.generation += 1
            state.phase = .starting
            state.process = process
            return state.generation
        }
        process.terminationHandler = { [weak self] ended in
            self?.workerEnded(ended, generation: generation)
        }
        do {
            try process.run()
        } catch {
            close(hostEnd)
            return "cannot start the worker process (\(executable.path)): \(error.localizedDescription)"
        }
        logger.info("worker process started (pid \(process.processIdentifier))")
        let limits = manifest.workerLimits
        let start = WorkerFrame.start(
            package: package, library: library.path, config: manifest.configJSON, concurrent: manifest.concurrent,
            memoryBytes: UInt64(limits.memoryMB ?? 0) << 20, openFiles: UInt64(limits.openFiles ?? 0),
            cpuSeconds: UInt64(limits.cpuSeconds ?? 0), user: manifest.workerUser)
        // Nothing here waits: a restart may be made from anywhere. A worker that cannot be
        // talked to is killed, and its end handled as any other.
        ClientBootstrap(group: group)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    // A worker's frames are held to the clients' frame limit: one that sends
                    // more breaks the framing, and is handled as crashed.
                    try channel.pipeline.syncOperations.addHandlers([
                        ByteToMessageHandler(FrameDecoder<WorkerFrame>(maxFrameBytes: core.limits.maxFrameBytes)),
                        MessageToByteHandler(FrameEncoder<WorkerFrame>()),
                        WorkerLinkHandler(worker: self, generation: generation),
                    ])
                }
            }
            .withConnectedSocket(hostEnd)
            .whenComplete { [self] result in
                switch result {
                case .success(let channel):
                    let current = state.withLock { state -> Bool in
                        guard state.generation == generation else { return false }
                        state.channel = channel
                        return true
                    }
                    if current { channel.writeAndFlush(start, promise: nil) } else { channel.close(promise: nil) }
                case .failure(let error):
                    logger.error("cannot talk to the worker process: \(error)")
                    close(hostEnd)
                    Glibc.kill(process.processIdentifier, SIGKILL)
                }
            }
        return nil
    }

    private func kill() {
        let process = state.withLock { $0.process }
        if let process, process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
    }

    /// The worker's socket closed: if the process is still there (it closed the socket, or
    /// broke the framing), it is killed, and its end is handled as a crash.
    func linkClosed(generation: Int) {
        let process = state.withLock { $0.generation == generation ? $0.process : nil }
        if let process, process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
    }

    private func workerEnded(_ process: Process, generation: Int) {
        let hung = state.withLock { state -> String? in
            guard state.generation == generation else { return nil }
            defer { state.hungReason = nil }
            return state.hungReason
        }
        let how =
            hung.map { "\($0) and was killed" }
            ?? (process.terminationReason == .uncaughtSignal
                ? "was killed by signal \(process.terminationStatus) (\(signalName(process.terminationStatus)))"
                : "exited with status \(process.terminationStatus)")
        let now = ContinuousClock.now
        let (opens, launches, channel, verdict) = state.withLock {
            state -> (
                [@Sendable (AppServiceConnectionStatus) -> Void], [@Sendable (LaunchOutcome) -> Void], (any Channel)?,
                Phase?
            ) in
            guard state.generation == generation else { return ([], [], nil, nil) }
            let opens = Array(state.opens.values)
            let launches = Array(state.launches.values)
            state.opens.removeAll()
            state.launches.removeAll()
            let channel = state.channel
            state.channel = nil
            state.process = nil
            state.timeoutsSinceAnswer = 0
            if state.shuttingDown {
                state.phase = .failed(reason: "the host is shutting down")
                return (opens, launches, channel, nil)
            }
            if case .starting = state.phase, let ready = state.ready {
                // It died while loading: the load fails with the reason.
                state.startError = state.startError ?? "the worker process \(how) while loading the plugin"
                state.phase = .failed(reason: state.startError!)
                state.ready = nil
                ready.signal()
                return (opens, launches, channel, nil)
            }
            state.crashes = state.crashes.filter { now - $0 < Self.crashWindow } + [now]
            state.phase =
                state.crashes.count >= Self.maxCrashes
                ? .failed(
                    reason:
                        "its worker process crashed \(state.crashes.count) times within \(describe(Self.crashWindow)); it stays unavailable until the host restarts"
                )
                : .restarting(reason: "its worker process \(how); it is being restarted")
            return (opens, launches, channel, state.phase)
        }
        channel?.close(promise: nil)
        guard let verdict else { return }
        let reason = "the service's worker process \(how)"
        logger.error("worker process (pid \(process.processIdentifier)) \(how)")
        for open in opens { open(.appUnavailable) }
        for launch in launches { launch(LaunchOutcome(status: .appUnavailable, error: reason)) }
        core.backendFailed(self, reason: reason)
        switch verdict {
        case .failed(let why):
            logger.error("package \(package) is given up: \(why)")
        default:
            let crashes = state.withLock { $0.crashes.count }
            let delay = Duration.milliseconds(min(250 << (crashes - 1), 30_000))
            logger.notice("restarting the worker in \(describe(delay))")
            DispatchQueue.global().asyncAfter(deadline: .now() + delay.seconds) { [self] in restart() }
        }
    }

    private func restart() {
        let shuttingDown = state.withLock { $0.shuttingDown }
        guard !shuttingDown else { return }
        if let error = launchWorker() {
            logger.error("the worker could not be restarted: \(error)")
            state.withLock { $0.phase = .failed(reason: error) }
        }
    }

    // MARK: Frames from the worker

    func received(_ frame: WorkerFrame, generation: Int) {
        guard state.withLock({ $0.generation == generation }) else { return }
        switch frame {
        case .ready(let error):
            let ready = state.withLock { state -> DispatchSemaphore? in
                if let error {
                    state.startError = "the plugin did not load in its worker process: \(error)"
                } else {
                    state.phase = .running
                }
                let ready = state.ready
                state.ready = nil
                return ready
            }
            if let error, ready == nil { logger.error("the restarted worker could not load the plugin: \(error)") }
            ready?.signal()
        case .opened(let channel, let status):
            let completion = state.withLock { $0.opens.removeValue(forKey: channel) }
            let checked = Int32(exactly: status).flatMap(AppServiceConnectionStatus.init(checking:)) ?? .unknown
            completion?(checked)
        case .respond(let id, let status, let message, let error):
            state.withLock { $0.timeoutsSinceAnswer = 0 }
            let checked = Int32(exactly: status).flatMap(AppServiceResponseStatus.init(checking:)) ?? .unknown
            _ = core.respond(to: id, from: self, status: checked, message: message?.buffer, error: error)
        case .send(let call, let channel, let message):
            switch core.send(message.buffer, on: channel, from: self) {
            case .success(let id): reply(.reply(call: call, error: nil, id: id, status: nil, reason: nil))
            case .failure(let refusal):
                reply(.reply(call: call, error: refusal.name, id: nil, status: nil, reason: nil))
            }
        case .close(let call, let channel, let status):
            let result = core.closeChannel(
                channel, from: self, status: AppServiceClosedStatus(rawValue: Int(clamping: status)))
            if case .failure(let refusal) = result {
                reply(.reply(call: call, error: refusal.name, id: nil, status: nil, reason: nil))
            } else {
                reply(.reply(call: call, error: nil, id: nil, status: nil, reason: nil))
            }
        case .launchUri(let call, let uri, let data, let channel):
            // A launch may take a while: it runs on the launch threads.
            core.launchPool.submit { [self] poolState in
                let outcome =
                    poolState == .active
                    ? core.launch(
                        fromBackend: self, channel: channel, uri: uri,
                        data: data.map { Array($0.buffer.readableBytesView) })
                    : LaunchOutcome(status: .remoteSystemUnavailable, error: "the host is shutting down")
                reply(
                    .reply(
                        call: call, error: nil, id: nil, status: UInt64(max(outcome.status.rawValue, 0)),
                        reason: outcome.error))
            }
        case .launched(let call, let status, let reason):
            let completion = state.withLock { $0.launches.removeValue(forKey: call) }
            let checked = Int32(exactly: status).flatMap(RemoteLaunchUriStatus.init(checking:)) ?? .unknown
            completion?(LaunchOutcome(status: checked, error: reason))
        default:
            logger.notice("the worker sent an unexpected \(untrusted(frame.type, limit: 40)) frame; ignored")
        }
    }

    private func reply(_ frame: WorkerFrame) {
        state.withLock { $0.channel }?.writeAndFlush(frame, promise: nil)
    }

    /// The worker's channel when it is running, or why it is not.
    private func running() -> Result<any Channel, PluginLoadError> {
        state.withLock { state in
            switch state.phase {
            case .running:
                if let channel = state.channel { return .success(channel) }
                return .failure(PluginLoadError(reason: "its worker process is not running"))
            case .starting: return .failure(PluginLoadError(reason: "its worker process is starting"))
            case .restarting(let reason), .failed(let reason): return .failure(PluginLoadError(reason: reason))
            }
        }
    }

    // MARK: ServiceBackend

    func open(_ channel: ChannelInfo, completion: @escaping @Sendable (AppServiceConnectionStatus) -> Void) {
        let link = state.withLock { state -> (any Channel)? in
            guard case .running = state.phase, let link = state.channel else { return nil }
            state.opens[channel.id] = completion
            return link
        }
        guard let link else {
            if case .failure(let why) = running() {
                core.breaches.record(
                    "package unavailable \(package)", level: .notice, "open refused: package \(package): \(why.reason)")
            }
            completion(.appUnavailable)
            return
        }
        link.writeAndFlush(
            WorkerFrame.open(
                channel: channel.id, service: channel.service, clientId: channel.clientId,
                clientName: channel.clientName, isRemote: channel.isRemote),
            promise: nil)
    }

    func request(_ request: UInt64, on channel: UInt64, message: ByteBuffer) {
        switch running() {
        case .success(let link):
            link.writeAndFlush(
                WorkerFrame.request(channel: channel, id: request, message: EncodedValueSet(uncheckedBytes: message)),
                promise: nil)
        case .failure(let why):
            core.answer(request, status: .appUnavailable, error: "package \(package): \(why.reason)")
        }
    }

    func response(to request: UInt64, on channel: UInt64, status: AppServiceResponseStatus, message: ByteBuffer?) {
        guard case .success(let link) = running() else { return }
        link.writeAndFlush(
            WorkerFrame.response(
                channel: channel, id: request, status: UInt64(max(status.rawValue, 0)),
                message: message.map { EncodedValueSet(uncheckedBytes: $0) }),
            promise: nil)
    }

    func closed(channel: UInt64, status: AppServiceClosedStatus, by closer: ChannelCloser) {
        guard case .success(let link) = running() else { return }
        link.writeAndFlush(
            WorkerFrame.closed(channel: channel, status: UInt64(max(status.rawValue, 0)), by: UInt64(closer.rawValue)),
            promise: nil)
    }

    func abandoned(request: UInt64, timedOut: Bool) {
        guard case .success(let link) = running() else { return }
        link.writeAndFlush(WorkerFrame.answered(id: request), promise: nil)
        guard timedOut else { return }
        // A worker that lets request after request time out without answering any is
        // taken as hung: it is killed, and restarted as after a crash.
        let (silent, generation) = state.withLock { state -> (Int, Int) in
            state.timeoutsSinceAnswer += 1
            return (state.timeoutsSinceAnswer, state.generation)
        }
        if silent == Self.maxSilentTimeouts {
            logger.error(
                "the worker stopped answering: \(silent) requests in a row timed out with no answer between them; killing it"
            )
            state.withLock { $0.hungReason = "stopped answering (\(silent) requests in a row timed out)" }
            linkClosed(generation: generation)
        }
    }

    func launch(_ launch: LaunchInfo, completion: @escaping @Sendable (LaunchOutcome) -> Void) {
        let taken = state.withLock { state -> (UInt64, any Channel)? in
            guard case .running = state.phase, let link = state.channel else { return nil }
            let call = state.nextLaunch
            state.nextLaunch += 1
            state.launches[call] = completion
            return (call, link)
        }
        guard let (call, link) = taken else {
            let why = (try? running().get()).map { _ in "" } ?? "its worker process is not running"
            completion(LaunchOutcome(status: .appUnavailable, error: "package \"\(package)\": \(why)"))
            return
        }
        link.writeAndFlush(
            WorkerFrame.launch(
                call: call, uri: launch.uri,
                data: launch.data.map { EncodedValueSet(uncheckedBytes: ByteBuffer(bytes: $0)) },
                clientId: launch.clientId, isRemote: launch.isRemote),
            promise: nil)
    }

    func shutDown(within timeout: Duration) -> Bool {
        let (link, process) = state.withLock { state -> ((any Channel)?, Process?) in
            state.shuttingDown = true
            return (state.channel, state.process)
        }
        guard let process else { return true }
        link?.writeAndFlush(WorkerFrame.shutdown, promise: nil)
        let deadline = ContinuousClock.now + timeout
        while process.isRunning, ContinuousClock.now < deadline { usleep(10_000) }
        if process.isRunning {
            Glibc.kill(process.processIdentifier, SIGKILL)
            return false
        }
        return true
    }
}

/// The host's end of a worker's socket.
final class WorkerLinkHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = WorkerFrame
    let worker: WorkerProcess
    let generation: Int

    init(worker: WorkerProcess, generation: Int) {
        self.worker = worker
        self.generation = generation
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        worker.received(unwrapInboundIn(data), generation: generation)
    }

    func channelInactive(context: ChannelHandlerContext) {
        worker.linkClosed(generation: generation)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A worker that breaks the framing is treated as crashed.
        context.close(promise: nil)
    }
}

/// SIGSEGV, SIGABRT, ...: the name of a signal, for the log.
func signalName(_ signal: Int32) -> String {
    let names: [Int32: String] = [
        SIGHUP: "SIGHUP", SIGINT: "SIGINT", SIGQUIT: "SIGQUIT", SIGILL: "SIGILL", SIGTRAP: "SIGTRAP",
        SIGABRT: "SIGABRT", SIGBUS: "SIGBUS", SIGFPE: "SIGFPE", SIGKILL: "SIGKILL", SIGSEGV: "SIGSEGV",
        SIGPIPE: "SIGPIPE", SIGALRM: "SIGALRM", SIGTERM: "SIGTERM", SIGXCPU: "SIGXCPU", SIGXFSZ: "SIGXFSZ",
    ]
    return names[signal] ?? "signal \(signal)"
}
