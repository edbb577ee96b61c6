import AtriumProtocol
import AtriumValues
import CAtriumSystem
import Dispatch
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A package whose plugin runs in a worker process of its own (`"isolation": "process"`):
/// the host's side of the worker's links. Calls on the seam become frames to the worker
/// (``WorkerFrame``); the worker's frames become calls on the host's side of the seam, checked
/// as any backend's are.
///
/// A worker is untrusted: everything it sends is bounded. Its frames are held to the clients'
/// frame limit; what the host writes to it is bounded by a high-water mark (a worker that
/// stops reading gets no more work, and is killed after the response timeout); its launches
/// in flight are capped; opens, launches and requests it does not answer time out, and three
/// requests in a row that time out with no answer between them mark it as hung.
///
/// A worker that dies (a signal, an exit, a link closing, or killed as hung) takes only
/// its own package's work with it: the package's channels are closed with status Unknown,
/// its requests in flight are answered AppUnavailable (6), and the log names the package and
/// the signal or exit status. The host then starts a new worker after a delay that doubles
/// with each crash (0.25 s up to 30 s), and after ``maxCrashes`` crashes within
/// ``crashWindow`` it gives the package up: `open` answers AppUnavailable (2) with the reason
/// until the package is reloaded or the host restarts.
final class WorkerProcess: ServiceBackend, Sendable {
    let package: String
    let library: URL
    private let manifest: Manifest
    private unowned let core: HostCore
    private let logger: Logger
    private let executable: URL
    private let group: any EventLoopGroup
    /// The host's event loops: the worker gets a link on each.
    private let loops: [any EventLoop]

    static let maxCrashes = 5
    static let crashWindow = Duration.seconds(60)
    /// Requests in a row that may time out, with no answer between them, before the worker
    /// is taken as hung.
    static let maxSilentTimeouts = 3
    /// Launches a worker may have waiting on the host at once (its plugin's `launch_uri`).
    static let maxLaunchesFromWorker = 4
    /// How long a started worker has to load its plugin and say so.
    static let startTimeout = Duration.seconds(10)
    /// What the host buffers for a worker that does not read it, before it stops sending it
    /// work (and the low-water mark at which it starts again).
    static let outputHighWater = 1 << 20
    static let outputLowWater = 256 << 10

    private enum Phase {
        /// Started, `ready` not yet received.
        case starting
        case running
        /// Down, a new worker due at the time set.
        case restarting(reason: String)
        /// Given up on, or shut down.
        case failed(reason: String)
    }

    private struct State {
        var phase = Phase.starting
        /// The links to the worker, one per event loop of the host (all set, or none).
        var links: [WorkerLink] = []
        /// Which link each channel's frames travel on (the one of the loop that opened it).
        var channelLinks: [UInt64: Int] = [:]
        var process: ChildProcess?
        /// Which start of the worker this is: frames and exits of an earlier one are ignored.
        var generation = 0
        var opens: [UInt64: @Sendable (AppServiceConnectionStatus) -> Void] = [:]
        var launches: [UInt64: @Sendable (LaunchOutcome) -> Void] = [:]
        var nextLaunch: UInt64 = 1
        /// Channels this generation of the worker accepted: a request on another channel of
        /// this package (opened with a worker that has died since) never reaches it.
        var openChannels: Set<UInt64> = []
        /// The worker's own launches waiting on the host.
        var launchesFromWorker = 0
        var crashes: [ContinuousClock.Instant] = []
        var shuttingDown = false
        /// Set when the host killed the worker: the reason it gives.
        var killReason: String?
        /// The first start, waited for by ``start()``.
        var ready: DispatchSemaphore?
        /// Kills a start that never says `ready`; cancelled when it does, so that it does not
        /// hold this backend for the rest of ``startTimeout`` (a reload retires it meanwhile).
        var startTimer: Scheduled<Void>?
        var startError: String?
        /// The links over their high-water mark.
        var blocked: Set<Int> = []
        /// The file at the library's path when the latest worker began, which it loads.
        var libraryFile: PluginLibrary.FileIdentity?
    }

    private let state = Mutex(State())
    /// Requests (and opens) timed out since the worker last answered one. Counted up and reset
    /// at a worker's end under `state`'s lock; an answer resets it without the lock (and only
    /// when a timeout has counted since), so answers take no lock for it.
    private let silentTimeouts = Atomic<Int>(0)

    var health: BackendHealth {
        state.withLock { state in
            let pid = state.process?.processIdentifier
            let now = ContinuousClock.now
            let crashes = state.crashes.filter { now - $0 < Self.crashWindow }.count
            switch state.phase {
            case .starting: return BackendHealth(state: .starting, pid: pid, recentCrashes: crashes)
            case .running: return BackendHealth(state: .ready, pid: pid, recentCrashes: crashes)
            case .restarting(let reason):
                return BackendHealth(state: .restarting, reason: reason, recentCrashes: crashes)
            case .failed(let reason): return BackendHealth(state: .failed, reason: reason, recentCrashes: crashes)
            }
        }
    }

    /// How many exist, current or retired by a reload and not yet freed (`host.status`): a
    /// retired worker kept in memory shows here.
    static let live = Atomic<Int>(0)

    deinit {
        Self.live.wrappingSubtract(1, ordering: .relaxed)
    }

    init(manifest: Manifest, library: URL, executable: URL, core: HostCore, group: any EventLoopGroup, logger: Logger) {
        Self.live.wrappingAdd(1, ordering: .relaxed)
        self.manifest = manifest
        package = manifest.package
        self.library = library
        self.executable = executable
        self.core = core
        self.group = group
        // At most as many links as one message can pass the worker the ends of (two each);
        // loops past that share them.
        loops = Array(Array(group.makeIterator()).prefix(Int(ATRIUM_MAX_PASSED_DESCRIPTORS) / 2))
        var logger = logger
        logger[metadataKey: "package"] = "\(manifest.package)"
        self.logger = logger
    }

    // MARK: Starting and losing the worker

    /// Starts the worker and waits for it to load the plugin (at most ``startTimeout``).
    /// When it fails, the object is given up for good: nothing restarts it.
    func start() throws(PluginLoadError) {
        try begin().finish()
    }

    /// A worker started and not yet known to be ready: several start at once, and are then
    /// waited for together (a host with many worker packages starts in the time of the
    /// slowest, not of all of them added up).
    struct PendingStart {
        let worker: WorkerProcess
        let ready: DispatchSemaphore
        /// ``startTimeout`` after the worker began: workers begun together are waited for
        /// together, not one timeout after another.
        let deadline: DispatchTime

        /// Waits for the worker to load its plugin (until ``deadline``).
        func finish() throws(PluginLoadError) {
            try worker.awaitReady(ready, until: deadline)
        }
    }

    /// Starts the worker without waiting for it.
    func begin() throws(PluginLoadError) -> PendingStart {
        let deadline = DispatchTime.now() + Self.startTimeout.seconds
        let ready = DispatchSemaphore(value: 0)
        state.withLock { $0.ready = ready }
        if let error = launchWorker() {
            giveUp(error)
            throw PluginLoadError(reason: error)
        }
        return PendingStart(worker: self, ready: ready, deadline: deadline)
    }

    private func awaitReady(_ ready: DispatchSemaphore, until deadline: DispatchTime) throws(PluginLoadError) {
        let loaded = ready.wait(timeout: deadline) == .success
        let error = state.withLock { state -> String? in
            if !loaded { return "the worker process did not load the plugin within \(describe(Self.startTimeout))" }
            return state.startError
        }
        if let error {
            giveUp(error)
            throw PluginLoadError(reason: error)
        }
    }

    /// SIGKILL for a worker process that runs, and everything it started (a worker leads a
    /// process group of its own); never for one that did not start: its pid would be 0, the
    /// host's own group.
    private static func kill(_ process: ChildProcess?) {
        process?.signal(SIGKILL, group: true)
    }

    /// Marks the package failed and kills its worker: no restart follows.
    private func giveUp(_ reason: String) {
        let process = state.withLock { state -> ChildProcess? in
            state.phase = .failed(reason: reason)
            state.ready = nil
            return state.process
        }
        Self.kill(process)
    }

    /// The library file at its path when the latest worker began (which it loads, unless
    /// the file changes while it starts), or nil when none was there.
    var libraryFile: PluginLibrary.FileIdentity? { state.withLock { $0.libraryFile } }

    /// Starts a worker process; returns why it could not.
    private func launchWorker() -> String? {
        // Checked again at every start, a restart after a crash included: the worker loads the
        // library by its path, and what is there now is what it loads.
        if core.configuration.strictModes, let problem = FileTrust.problem(file: library.path, what: "plugin library") {
            return problem
        }
        let file = PluginLibrary.FileIdentity(library.path)
        state.withLock { $0.libraryFile = file }
        // A link per event loop of the host, each a pipe toward the worker and one toward the
        // host (a round trip over pipes costs less than over a Unix socket: BENCHMARKS.md). The
        // worker's standard input is one end of a socket pair, which carries the worker's ends
        // of every link over to it before anything else, and nothing after.
        var control: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &control) == 0 else {
            return "cannot make a socket pair for the worker: errno \(errno)"
        }
        // For each link, the host's ends (it reads `input` and writes `output`), and a copy of
        // `output` for the link to write directly (``WorkerLink``).
        var hostEnds: [(input: Int32, output: Int32, copy: Int32)] = []
        // For each link, the worker's ends, in the order they are passed: what it reads, what it
        // writes.
        var workerEnds: [Int32] = []
        func closeAll() {
            for descriptor in control + hostEnds.flatMap({ [$0.input, $0.output, $0.copy] }) + workerEnds {
                close(descriptor)
            }
        }
        for _ in loops.indices {
            var towardWorker: [Int32] = [-1, -1]
            var towardHost: [Int32] = [-1, -1]
            guard atrium_make_pipe(&towardWorker) == 0 else {
                closeAll()
                return "cannot make a pipe for the worker: errno \(errno)"
            }
            let copy = fcntl(towardWorker[1], F_DUPFD_CLOEXEC, 3)
            guard copy >= 0, atrium_make_pipe(&towardHost) == 0 else {
                let error = errno
                for descriptor in towardWorker + (copy >= 0 ? [copy] : []) { close(descriptor) }
                closeAll()
                return "cannot make a pipe for the worker: errno \(error)"
            }
            hostEnds.append((input: towardHost[0], output: towardWorker[1], copy: copy))
            workerEnds += [towardWorker[0], towardHost[1]]
        }
        // glibc reserves 64 MiB of address space per thread's malloc arena: two arenas keep a
        // worker's address space, which its memory limit counts, near what it really uses.
        // Swift's crash backtracer says where a plugin crashed (the crashed thread, file and
        // line), as it does for a plugin in the host's own process; its output reaches the log
        // with the worker's. It holds a crashed worker for a second or so while it
        // symbolicates, which delays the answers to requests in flight and the restart: so a
        // worker that follows a crash in the last minute runs without it, and a crash loop
        // restarts at its own pace. The host's environment decides when it sets SWIFT_BACKTRACE.
        var environment = ProcessInfo.processInfo.environment
        environment["MALLOC_ARENA_MAX"] = "2"
        let crashedRecently = state.withLock { state in
            state.crashes.contains { ContinuousClock.now - $0 < Self.crashWindow }
        }
        environment["SWIFT_BACKTRACE"] =
            environment["SWIFT_BACKTRACE"]
            ?? (crashedRecently
                ? "enable=no"
                : "enable=yes,interactive=no,color=no,threads=crashed,registers=none,images=none,symbolicate=fast,limit=24,top=8")
        // What the worker (its plugin included) prints goes to the host's log through a pipe,
        // escaped, cut and counted as a program's output is: never raw into the log.
        var output: [Int32] = [-1, -1]
        guard atrium_make_pipe(&output) == 0 else {
            closeAll()
            return "cannot make a pipe for the worker's output: errno \(errno)"
        }
        let generation = state.withLock { state -> Int? in
            guard !state.shuttingDown else { return nil }
            state.generation += 1
            state.phase = .starting
            state.links = []
            state.channelLinks.removeAll()
            state.openChannels.removeAll()
            state.launchesFromWorker = 0
            state.blocked = []
            return state.generation
        }
        guard let generation else {
            closeAll()
            close(output[0])
            close(output[1])
            return "the host is shutting down"
        }
        let process: ChildProcess
        do {
            // The control socket's end becomes the worker's standard input.
            process = try ChildProcess(
                executable: executable, arguments: ["--worker", "--worker-links", "\(loops.count)"],
                environment: environment, input: control[1], output: output[1], error: output[1],
                // What the plugin started goes with its worker.
                killGroupWhenItEnds: true
            ) { [self] ended in
                // Held until the worker is reaped, which a retired worker soon is.
                workerEnded(ended, generation: generation)
            }
        } catch {
            closeAll()
            close(output[0])
            close(output[1])
            return "cannot start the worker process (\(executable.path)): \(error)"
        }
        // Published only once it runs (a process that never started has no pid to signal),
        // and only if shutdown did not begin meanwhile.
        let current = state.withLock { state -> Bool in
            guard state.generation == generation, !state.shuttingDown else { return false }
            state.process = process
            return true
        }
        guard current else {
            Self.kill(process)
            closeAll()
            close(output[0])
            close(output[1])
            return "the host is shutting down"
        }
        // The worker's ends of the links go over the control socket, the only thing it carries.
        let passed = workerEnds.withUnsafeBufferPointer {
            atrium_send_descriptors(control[0], $0.baseAddress, Int32($0.count))
        }
        // The worker has its copies: with the host's closed, the worker closing its ends (or
        // dying) ends the links at once, and the output pipe ends with the worker.
        for descriptor in workerEnds + control { close(descriptor) }
        close(output[1])
        logger.info("worker process started (pid \(process.processIdentifier))")
        OutputLog.attach(output[0], name: "worker \(process.processIdentifier)", logger: logger)
        guard passed == 0 else {
            for link in hostEnds {
                close(link.input)
                close(link.output)
                close(link.copy)
            }
            Self.kill(process)
            return nil
        }
        // A worker that never says it is ready (the first start waits in ``start()``).
        let startTimer = group.next().scheduleTask(in: .init(Self.startTimeout)) { [self] in
            let stuck = state.withLock { state -> Bool in
                guard state.generation == generation, case .starting = state.phase, state.ready == nil else {
                    return false
                }
                state.killReason = "did not load the plugin within \(describe(Self.startTimeout))"
                return true
            }
            if stuck { Self.kill(process) }
        }
        let stillStarting = state.withLock { state -> Bool in
            guard state.generation == generation, case .starting = state.phase else { return false }
            state.startTimer = startTimer
            return true
        }
        if !stillStarting { startTimer.cancel() }
        let limits = manifest.workerLimits
        let start = WorkerFrame.start(
            package: package, library: library.path, config: manifest.configJSON, concurrent: manifest.concurrent,
            memoryBytes: UInt64(limits.memoryMB ?? 0) << 20, openFiles: UInt64(limits.openFiles ?? 0),
            cpuSeconds: UInt64(limits.cpuSeconds ?? 0), user: manifest.workerUser)
        // Which pipes the host's ends are, taken before NIO has them: NIO gives back the ends of
        // a channel it could not make, and closes those of one it made and then could not set
        // up. Only an end still on its own pipe is closed after a failure (a closed number may
        // be another's by then).
        let identities = hostEnds.map { (input: fileIdentity($0.input), output: fileIdentity($0.output)) }
        let ends = hostEnds
        // Nothing here waits: a restart may be made from anywhere. A worker that cannot be
        // talked to is killed, and its end handled as any other. Each link lives on its loop.
        let connections = ends.enumerated().map { index, link in
            NIOPipeBootstrap(group: loops[index])
                .channelOption(
                    .writeBufferWaterMark, value: .init(low: Self.outputLowWater, high: Self.outputHighWater)
                )
                .channelInitializer { [self] channel in
                    channel.eventLoop.makeCompletedFuture {
                        // A worker's frames are held to the clients' frame limit: one that sends
                        // more breaks the framing, and is handled as crashed.
                        try channel.pipeline.syncOperations.addHandler(
                            WorkerLinkHandler(
                                worker: self, generation: generation, link: index,
                                maxFrameBytes: core.limits.maxFrameBytes))
                    }
                }
                // The channel owns both ends from here, and closes them when it closes.
                .takingOwnershipOfDescriptors(input: link.input, output: link.output)
        }
        EventLoopFuture.whenAllComplete(connections, on: loops[0]).whenSuccess { [self] results in
            let channels = results.compactMap { try? $0.get() }
            guard channels.count == results.count else {
                logger.error("cannot talk to the worker process")
                for channel in channels { channel.close(promise: nil) }
                for (index, result) in results.enumerated() {
                    close(ends[index].copy)
                    guard case .failure = result else { continue }
                    if let identity = identities[index].input, fileIdentity(ends[index].input) == identity {
                        close(ends[index].input)
                    }
                    if let identity = identities[index].output, fileIdentity(ends[index].output) == identity {
                        close(ends[index].output)
                    }
                }
                Self.kill(process)
                return
            }
            // Each link owns its copy from here.
            let links = zip(channels, ends).map { WorkerLink($0, descriptor: $1.copy) }
            let current = state.withLock { state -> Bool in
                guard state.generation == generation, !state.shuttingDown else { return false }
                state.links = links
                return true
            }
            if current {
                links[0].send(start)
            } else {
                for channel in channels { channel.close(promise: nil) }
                Self.kill(process)
            }
        }
        return nil
    }

    /// Kills the worker of `generation` (if it is still that one) for `reason`; its end is
    /// then handled as a crash.
    private func kill(generation: Int, reason: String?) {
        let process = state.withLock { state -> ChildProcess? in
            // Between a worker's end and the next start there is no process: nothing to kill,
            // and no reason to leave for the next worker's end.
            guard state.generation == generation, let process = state.process else { return nil }
            if let reason, state.killReason == nil { state.killReason = reason }
            return process
        }
        Self.kill(process)
    }

    /// A link to the worker closed: if the process is still there (it closed its end, or
    /// broke the framing), it is killed, and its end is handled as a crash.
    func linkClosed(generation: Int) {
        kill(generation: generation, reason: nil)
    }

    /// The worker sent bytes that are not a frame the host can read: it is killed, and its end
    /// handled as a crash, with `error` as the reason.
    func linkBroken(generation: Int, error: FrameError) {
        kill(generation: generation, reason: "sent what is not a frame (\(untrusted(error.description, limit: 200)))")
    }

    /// A link to the worker went over (or back under) its high-water mark.
    func linkWritabilityChanged(writable: Bool, generation: Int, link: Int) {
        let changed = state.withLock { state -> Bool in
            guard state.generation == generation, state.blocked.contains(link) == writable else { return false }
            if writable { state.blocked.remove(link) } else { state.blocked.insert(link) }
            return true
        }
        guard changed, !writable else { return }
        core.breaches.record(
            "worker not reading \(package)", "the worker of package \(package) is not reading what the host sends it",
            metadata: ["package": "\(package)"])
        let timeout = core.configuration.responseTimeout
        group.next().scheduleTask(in: .init(timeout)) { [self] in
            let still = state.withLock { $0.generation == generation && $0.blocked.contains(link) }
            if still {
                kill(generation: generation, reason: "stopped reading its link for \(describe(timeout))")
            }
        }
    }

    /// The worker process ended. What it wrote before it went (an answer, or why the plugin
    /// did not load) is read first: its links are left to reach their end (at most a second)
    /// before the end is handled.
    private func workerEnded(_ process: ChildProcess, generation: Int) {
        let links = state.withLock { $0.generation == generation ? $0.links : [] }
        guard let first = links.first else {
            handleEnd(process, generation: generation)
            return
        }
        let handled = NIOLockedValueBox(false)
        let handle: @Sendable () -> Void = { [self] in
            guard
                !handled.withLockedValue({
                    let was = $0; $0 = true; return was
                })
            else { return }
            handleEnd(process, generation: generation)
        }
        EventLoopFuture.whenAllComplete(links.map(\.channel.closeFuture), on: first.channel.eventLoop)
            .whenComplete { _ in handle() }
        first.channel.eventLoop.scheduleTask(in: .seconds(1)) { handle() }
    }

    private func handleEnd(_ process: ChildProcess, generation: Int) {
        let killed = state.withLock { state -> String? in
            guard state.generation == generation else { return nil }
            defer { state.killReason = nil }
            return state.killReason
        }
        let how =
            killed.map { "\($0) and was killed" }
            ?? (process.terminationReason == .uncaughtSignal
                ? "was killed by signal \(process.terminationStatus) (\(signalName(process.terminationStatus)))"
                : "exited with status \(process.terminationStatus)")
        let reason = "the service's worker process \(how)"
        let now = ContinuousClock.now
        let (opens, launches, links, verdict) = state.withLock {
            state -> (
                [@Sendable (AppServiceConnectionStatus) -> Void], [@Sendable (LaunchOutcome) -> Void], [WorkerLink],
                Phase?
            ) in
            guard state.generation == generation else { return ([], [], [], nil) }
            let opens = Array(state.opens.values)
            let launches = Array(state.launches.values)
            state.opens.removeAll()
            state.launches.removeAll()
            state.openChannels.removeAll()
            state.channelLinks.removeAll()
            let links = state.links
            state.links = []
            state.process = nil
            silentTimeouts.store(0, ordering: .relaxed)
            if state.shuttingDown {
                state.phase = .failed(reason: "the package was stopped")
                return (opens, launches, links, nil)
            }
            if case .failed = state.phase { return (opens, launches, links, nil) }
            if case .starting = state.phase, let ready = state.ready {
                // It died while loading: the load fails with the reason.
                state.startError = state.startError ?? "the worker process \(how) while loading the plugin"
                state.phase = .failed(reason: state.startError!)
                state.ready = nil
                ready.signal()
                return (opens, launches, links, nil)
            }
            state.crashes = state.crashes.filter { now - $0 < Self.crashWindow } + [now]
            state.phase =
                state.crashes.count >= Self.maxCrashes
                ? .failed(
                    reason:
                        "its worker process crashed \(state.crashes.count) times within \(describe(Self.crashWindow)); it stays unavailable until it is reloaded or the host restarts"
                )
                : .restarting(reason: "its worker process \(how); it is being restarted")
            return (opens, launches, links, state.phase)
        }
        for link in links { link.channel.close(promise: nil) }
        // Whoever waits on this worker hears at once, whatever comes next.
        for open in opens { open(.appUnavailable) }
        for launch in launches { launch(LaunchOutcome(status: .appUnavailable, error: reason)) }
        guard let verdict else { return }
        logger.error("worker process (pid \(process.processIdentifier)) \(how)")
        core.backendFailed(self, reason: reason)
        switch verdict {
        case .failed(let why):
            logger.error("package \(package) is given up: \(why)")
            core.backendLetGo()
        default:
            let crashes = state.withLock { $0.crashes.count }
            let delay = Duration.milliseconds(min(250 << (crashes - 1), 30_000))
            logger.notice("restarting the worker in \(describe(delay))")
            DispatchQueue.global().asyncAfter(deadline: .now() + delay.seconds) { [self] in restart() }
        }
    }

    private func restart() {
        // The host may have shut down while the restart waited: then its core may be gone
        // (`core` is unowned), and there is nothing to restart.
        guard !state.withLock({ $0.shuttingDown }) else { return }
        core.metrics?.restarted(package: package)
        // What the ended worker's links and tables held is given back a moment later.
        core.backendLetGo()
        if let error = launchWorker() {
            logger.error("the worker could not be restarted: \(error)")
            state.withLock { state in
                if !state.shuttingDown { state.phase = .failed(reason: error) }
            }
        }
    }

    // MARK: Frames from the worker

    /// A frame from the worker, on link `link` (replies go back on it).
    func received(_ frame: WorkerFrame, generation: Int, link: Int) {
        guard state.withLock({ $0.generation == generation }) else { return }
        switch frame {
        case .ready(let error):
            let (ready, starting) = state.withLock { state -> (DispatchSemaphore?, Bool) in
                guard case .starting = state.phase else { return (nil, false) }
                if let error {
                    let reason = "the plugin did not load in its worker process: \(untrusted(error, limit: 300))"
                    state.startError = reason
                    state.phase = .failed(reason: reason)
                } else {
                    state.phase = .running
                }
                let ready = state.ready
                state.ready = nil
                state.startTimer?.cancel()
                state.startTimer = nil
                return (ready, true)
            }
            guard starting else {
                violation("a second ready", generation: generation)
                return
            }
            if let error, ready == nil {
                logger.error("the restarted worker could not load the plugin: \(untrusted(error, limit: 300))")
            }
            if error != nil {
                // A worker whose plugin did not load ends by itself; one that stays (the plugin's
                // code ran in it) is ended, so that it cannot go on acting for the package.
                group.next().scheduleTask(in: .seconds(1)) { [self] in
                    kill(generation: generation, reason: "it stayed after its plugin failed to load")
                }
            }
            ready?.signal()
        case .opened(let channel, let status):
            let completion = state.withLock { state -> (@Sendable (AppServiceConnectionStatus) -> Void)? in
                guard let completion = state.opens.removeValue(forKey: channel) else { return nil }
                if status == 0 {
                    state.openChannels.insert(channel)
                } else {
                    state.channelLinks.removeValue(forKey: channel)
                }
                return completion
            }
            let checked = Int32(exactly: status).flatMap(AppServiceConnectionStatus.init(checking:)) ?? .unknown
            guard let completion else {
                // Accepted after the host stopped waiting (the client was told Unknown): the
                // plugin hears the channel is closed.
                if status == 0 {
                    reply(
                        .closed(
                            channel: channel, status: UInt64(AppServiceClosedStatus.canceled.rawValue),
                            by: UInt64(ChannelCloser.host.rawValue)),
                        generation, link)
                }
                return
            }
            completion(checked)
        case .respond(let id, let status, let message, let error):
            let checked = Int32(exactly: status).flatMap(AppServiceResponseStatus.init(checking:)) ?? .unknown
            let result = core.respond(to: id, from: self, status: checked, message: message?.buffer, error: error)
            if case .success = result, silentTimeouts.load(ordering: .relaxed) != 0 {
                silentTimeouts.store(0, ordering: .relaxed)
            }
        case .send(let call, let channel, let message):
            switch core.send(message.buffer, on: channel, from: self) {
            case .success(let id):
                reply(.reply(call: call, error: nil, id: id, status: nil, reason: nil), generation, link)
            case .failure(let refusal):
                reply(.reply(call: call, error: refusal.name, id: nil, status: nil, reason: nil), generation, link)
            }
        case .close(let call, let channel, let status):
            let checked = Int32(exactly: status).flatMap(AppServiceClosedStatus.init(checking:)) ?? .unknown
            let result = core.closeChannel(channel, from: self, status: checked)
            if case .failure(let refusal) = result {
                reply(.reply(call: call, error: refusal.name, id: nil, status: nil, reason: nil), generation, link)
            } else {
                reply(.reply(call: call, error: nil, id: nil, status: nil, reason: nil), generation, link)
            }
        case .launchUri(let call, let uri, let data, let channel):
            let admitted = state.withLock { state -> Bool in
                guard state.launchesFromWorker < Self.maxLaunchesFromWorker else { return false }
                state.launchesFromWorker += 1
                return true
            }
            guard admitted else {
                core.breaches.record(
                    "worker launches \(package)",
                    "the worker of package \(package) has \(Self.maxLaunchesFromWorker) launches waiting, its limit")
                reply(
                    .reply(
                        call: call, error: nil, id: nil,
                        status: UInt64(RemoteLaunchUriStatus.deniedByRemoteSystem.rawValue),
                        reason: "the plugin has \(Self.maxLaunchesFromWorker) launches waiting, its limit"),
                    generation, link)
                return
            }
            // A launch may take a while: it runs on the launch threads.
            core.launchPool.submit { [self] poolState in
                let outcome =
                    poolState == .active
                    ? core.launch(
                        fromBackend: self, channel: channel, uri: uri,
                        data: data.map { Array($0.buffer.readableBytesView) })
                    : LaunchOutcome(status: .remoteSystemUnavailable, error: "the host is shutting down")
                state.withLock { state in
                    if state.generation == generation { state.launchesFromWorker -= 1 }
                }
                reply(
                    .reply(
                        call: call, error: nil, id: nil, status: UInt64(max(outcome.status.rawValue, 0)),
                        reason: outcome.error),
                    generation, link)
            }
        case .launched(let call, let status, let reason):
            let completion = state.withLock { $0.launches.removeValue(forKey: call) }
            let checked = Int32(exactly: status).flatMap(RemoteLaunchUriStatus.init(checking:)) ?? .unknown
            completion?(LaunchOutcome(status: checked, error: reason.map { untrusted($0, limit: 300) }))
        default:
            violation("an unexpected \(untrusted(frame.type, limit: 40)) frame", generation: generation)
        }
    }

    /// A frame the worker may not send: noted (rate-limited) and ignored.
    private func violation(_ what: String, generation: Int) {
        core.breaches.record(
            "worker protocol \(package)", "the worker of package \(package) sent \(what); ignored",
            metadata: ["package": "\(package)"])
    }

    /// Writes the host's reply to a call, to the worker that made it (not to one started
    /// since), on the link the call came on.
    private func reply(_ frame: WorkerFrame, _ generation: Int, _ link: Int) {
        state.withLock { state -> WorkerLink? in
            guard state.generation == generation, state.links.indices.contains(link) else { return nil }
            return state.links[link]
        }?.send(frame)
    }

    /// Which link serves the calling thread: the one on its event loop (a connection's frames
    /// then never change loops), else the first.
    private var currentLink: Int {
        guard let index = loops.firstIndex(where: { $0.inEventLoop }) else {
            // A loop past the 16th (or no loop): spread by the thread, consistently per loop.
            return loops.isEmpty ? 0 : Int(UInt(bitPattern: Int(bitPattern: pthread_self())) % UInt(loops.count))
        }
        return index
    }

    /// Link `link` when the worker is running (and, for new work, reading it), or why not.
    /// What the host owes the worker (answers to its messages, requests answered meanwhile)
    /// goes even to a link over its high-water mark.
    private func running(link: Int = 0, newWork: Bool = true) -> Result<WorkerLink, PluginLoadError> {
        state.withLock { Self.running($0, link: link, newWork: newWork) }
    }

    private static func running(_ state: State, link: Int, newWork: Bool) -> Result<WorkerLink, PluginLoadError> {
        switch state.phase {
        case .running:
            guard state.links.indices.contains(link) else {
                return .failure(PluginLoadError(reason: "its worker process is not running"))
            }
            if newWork, state.blocked.contains(link) {
                return .failure(PluginLoadError(reason: "its worker process is not reading what it is sent"))
            }
            return .success(state.links[link])
        case .starting: return .failure(PluginLoadError(reason: "its worker process is starting"))
        case .restarting(let reason), .failed(let reason): return .failure(PluginLoadError(reason: reason))
        }
    }

    /// The link a channel's frames travel on.
    private func link(of channel: UInt64) -> Int {
        state.withLock { $0.channelLinks[channel] ?? 0 }
    }

    // MARK: ServiceBackend

    func open(_ channel: ChannelInfo, completion: @escaping @Sendable (AppServiceConnectionStatus) -> Void) {
        let index = currentLink
        let taken = state.withLock { state -> (WorkerLink, Int)? in
            guard case .running = state.phase, state.links.indices.contains(index), !state.blocked.contains(index)
            else { return nil }
            state.opens[channel.id] = completion
            state.channelLinks[channel.id] = index
            return (state.links[index], state.generation)
        }
        guard let (link, generation) = taken else {
            if case .failure(let why) = running(link: index) {
                core.breaches.record(
                    "package unavailable \(package)", level: .notice, "open refused: package \(package): \(why.reason)")
            }
            completion(.appUnavailable)
            return
        }
        // The connection answers the client at its timeout; this forgets the open here, and
        // counts it as the worker not answering.
        group.next().scheduleTask(in: .init(core.configuration.responseTimeout)) { [self] in
            let forgotten = state.withLock { state -> Int? in
                guard state.opens.removeValue(forKey: channel.id) != nil else { return nil }
                state.channelLinks.removeValue(forKey: channel.id)
                return silentTimeouts.wrappingAdd(1, ordering: .relaxed).newValue
            }
            if let silent = forgotten { noteSilence(silent, generation: generation) }
        }
        link.send(
            WorkerFrame.open(
                channel: channel.id, service: channel.service, clientId: channel.clientId,
                clientName: channel.clientName, isRemote: channel.isRemote))
    }

    func request(_ request: UInt64, on channel: UInt64, message: ByteBuffer) {
        // One look under the lock: which link, and whether the worker takes new work on it.
        let route = state.withLock { state -> Result<WorkerLink, PluginLoadError>? in
            guard state.openChannels.contains(channel), let index = state.channelLinks[channel] else { return nil }
            return Self.running(state, link: index, newWork: true)
        }
        guard let route else {
            // Opened with a worker that has died since: the new one never saw it.
            core.answer(request, status: .appUnavailable, error: "package \(package): its worker process restarted")
            _ = core.closeChannel(channel, from: self, status: .unknown)
            return
        }
        switch route {
        case .success(let link):
            link.send(
                WorkerFrame.request(channel: channel, id: request, message: EncodedValueSet(uncheckedBytes: message)))
        case .failure(let why):
            core.answer(request, status: .appUnavailable, error: "package \(package): \(why.reason)")
        }
    }

    func response(to request: UInt64, on channel: UInt64, status: AppServiceResponseStatus, message: ByteBuffer?) {
        guard case .success(let link) = running(link: link(of: channel), newWork: false) else { return }
        link.send(
            WorkerFrame.response(
                channel: channel, id: request, status: UInt64(max(status.rawValue, 0)),
                message: message.map { EncodedValueSet(uncheckedBytes: $0) }))
    }

    func closed(channel: UInt64, status: AppServiceClosedStatus, by closer: ChannelCloser) {
        let link = state.withLock { state -> WorkerLink? in
            guard state.openChannels.remove(channel) != nil else { return nil }
            let index = state.channelLinks.removeValue(forKey: channel) ?? 0
            return state.links.indices.contains(index) ? state.links[index] : nil
        }
        link?.send(
            WorkerFrame.closed(channel: channel, status: UInt64(max(status.rawValue, 0)), by: UInt64(closer.rawValue)))
    }

    func abandoned(request: UInt64, on channel: UInt64, timedOut: Bool) {
        // On the channel's link, behind the request itself.
        if case .success(let link) = running(link: link(of: channel), newWork: false) {
            link.send(.answered(id: request))
        }
        guard timedOut else { return }
        // Counted for the worker the request went to, and only while it runs: a timeout of a
        // worker that has ended since says nothing about the next one. Under the lock that
        // ends a worker (and resets the count), so the two cannot interleave.
        let counted = state.withLock { state -> (Int, Int)? in
            guard state.openChannels.contains(channel) else { return nil }
            return (silentTimeouts.wrappingAdd(1, ordering: .relaxed).newValue, state.generation)
        }
        if let (silent, generation) = counted { noteSilence(silent, generation: generation) }
    }

    /// A worker that lets request after request (or open) time out without answering any is
    /// taken as hung: it is killed, and restarted as after a crash.
    private func noteSilence(_ silent: Int, generation: Int) {
        guard silent == Self.maxSilentTimeouts else { return }
        logger.error(
            "the worker stopped answering: \(silent) requests in a row timed out with no answer between them; killing it"
        )
        kill(generation: generation, reason: "stopped answering (\(silent) requests in a row timed out)")
    }

    func launch(_ launch: LaunchInfo, completion: @escaping @Sendable (LaunchOutcome) -> Void) {
        let taken = state.withLock { state -> (UInt64, WorkerLink)? in
            guard case .running = state.phase, let link = state.links.first, !state.blocked.contains(0) else {
                return nil
            }
            let call = state.nextLaunch
            state.nextLaunch += 1
            state.launches[call] = completion
            return (call, link)
        }
        guard let (call, link) = taken else {
            let why: String
            switch running() {
            case .success: why = "its worker process is not running"
            case .failure(let error): why = error.reason
            }
            completion(LaunchOutcome(status: .appUnavailable, error: "package \"\(package)\": \(why)"))
            return
        }
        // The host stops waiting at the response timeout; the entry goes then too.
        group.next().scheduleTask(in: .init(core.configuration.responseTimeout)) { [self] in
            _ = state.withLock { $0.launches.removeValue(forKey: call) }
        }
        link.send(
            WorkerFrame.launch(
                call: call, uri: launch.uri,
                data: launch.data.map { EncodedValueSet(uncheckedBytes: ByteBuffer(bytes: $0)) },
                clientId: launch.clientId, isRemote: launch.isRemote))
    }

    func shutDown(within timeout: Duration) -> Bool {
        let (links, process) = state.withLock { state -> ([WorkerLink], ChildProcess?) in
            state.shuttingDown = true
            return (state.links, state.process)
        }
        guard let process else { return true }
        if !links.isEmpty {
            // On every link, behind what each carries (the channels' `closed` among them): the
            // worker stops the plugin once all of them said so.
            for link in links { link.send(.shutdown) }
        } else {
            // Still connecting: there is no one to tell.
            Self.kill(process)
        }
        let deadline = ContinuousClock.now + timeout
        while process.isRunning, ContinuousClock.now < deadline { usleep(10_000) }
        if process.isRunning {
            Self.kill(process)
            return false
        }
        return true
    }
}

/// The host's end of a worker's link: it splits the bytes into frames and hands each to the
/// ``WorkerProcess`` (no frame value travels the pipeline, see ``WorkerLink``); a worker that
/// breaks the framing is handled as crashed. While the host's output to the worker is over its
/// high-water mark, the worker is not read (what it sends makes the host write replies).
final class WorkerLinkHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let worker: WorkerProcess
    let generation: Int
    let link: Int
    private var input: FrameInput<WorkerFrame>
    /// Whether the worker broke the framing: nothing it sends after is read as frames.
    private var broken = false

    init(worker: WorkerProcess, generation: Int, link: Int, maxFrameBytes: Int) {
        self.worker = worker
        self.generation = generation
        self.link = link
        input = FrameInput(maxFrameBytes: maxFrameBytes)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !broken else { return }
        do {
            // The answers of one read go out to each client with one flush.
            try FlushesAfterRead.collecting { () throws(FrameError) in
                try input.read(unwrapInboundIn(data)) { frame in
                    worker.received(frame, generation: generation, link: link)
                }
            }
        } catch {
            // A worker that breaks the framing is treated as crashed.
            broken = true
            worker.linkBroken(generation: generation, error: error)
            context.close(promise: nil)
        }
    }

    func read(context: ChannelHandlerContext) {
        if context.channel.isWritable { context.read() }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        let writable = context.channel.isWritable
        worker.linkWritabilityChanged(writable: writable, generation: generation, link: link)
        // Every write to the link is flushed as it is made (``WorkerLink``): nothing to flush.
        if writable { context.read() }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        worker.linkClosed(generation: generation)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
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

/// Which file `descriptor` is open on (its device and inode), or nil when it is not open.
private func fileIdentity(_ descriptor: Int32) -> [UInt64]? {
    var status = stat()
    guard fstat(descriptor, &status) == 0 else { return nil }
    return [UInt64(status.st_dev), UInt64(status.st_ino)]
}
