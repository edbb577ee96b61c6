import AtriumProtocol
import AtriumValues
import Dispatch
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Synchronization

// MARK: Starting and losing the worker

/// A worker's start and end: its links (``WorkerLinkEnds``) and process (``WorkerSpawn``) are
/// made and tied to this backend, and what its end leads to (``WorkerSupervisor``) is done.
extension WorkerProcess {
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
        state.withLock { $0.supervisor.awaitFirstStart(ready) }
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
            return state.supervisor.startError
        }
        if let error {
            giveUp(error)
            throw PluginLoadError(reason: error)
        }
    }

    /// Marks the package failed and kills its worker: no restart follows.
    private func giveUp(_ reason: String) {
        let process = state.withLock { state -> ChildProcess? in
            state.supervisor.giveUp(reason)
            return state.process
        }
        WorkerSpawn.kill(process)
    }

    /// Starts a worker process; returns why it could not.
    private func launchWorker() -> String? {
        // Checked again at every start, a restart after a crash included: the worker loads the
        // library by its path, and what is there now is what it loads.
        if core.configuration.strictModes, let problem = FileTrust.problem(file: library.path, what: "plugin library") {
            return problem
        }
        let file = PluginLibrary.FileIdentity(library.path)
        state.withLock { $0.libraryFile = file }
        let ends: WorkerLinkEnds
        do {
            ends = try WorkerLinkEnds(links: loops.count)
        } catch {
            return error.reason
        }
        let backtraces = state.withLock { $0.supervisor.backtraces(at: ContinuousClock.now) }
        let spawn: WorkerSpawn
        do {
            spawn = try WorkerSpawn(executable: executable, links: loops.count, backtraces: backtraces)
        } catch {
            ends.closeAll()
            return error.reason
        }
        let generation = state.withLock { state -> Int? in
            guard state.supervisor.starting() else { return nil }
            state.generation += 1
            state.links = []
            state.channelLinks.removeAll()
            state.openChannels.removeAll()
            state.launchesFromWorker = 0
            state.blocked = []
            return state.generation
        }
        guard let generation else {
            ends.closeAll()
            spawn.cancel()
            return "the host is shutting down"
        }
        let process: ChildProcess
        do {
            process = try spawn.run(input: ends.workerInput) { [self] ended in
                // Held until the worker is reaped, which a retired worker soon is.
                workerEnded(ended, generation: generation)
            }
        } catch {
            ends.closeAll()
            spawn.cancel()
            return error.reason
        }
        // Published only once it runs (a process that never started has no pid to signal),
        // and only if shutdown did not begin meanwhile.
        let current = state.withLock { state -> Bool in
            guard state.generation == generation, !state.supervisor.shuttingDown else { return false }
            state.process = process
            return true
        }
        guard current else {
            WorkerSpawn.kill(process)
            ends.closeAll()
            spawn.cancel()
            return "the host is shutting down"
        }
        // The worker has its copies: with the host's closed, the worker closing its ends (or
        // dying) ends the links at once, and the output pipe ends with the worker.
        let passed = ends.passToWorker()
        spawn.started(process, logger: logger)
        // Files cross on the descriptor socket, the worker's generation's own.
        let mailbox = DescriptorMailbox(socket: ends.takeDescriptorSocket())
        guard passed else {
            ends.closeHostEnds()
            WorkerSpawn.kill(process)
            return nil
        }
        let installed = state.withLock { state -> Bool in
            guard state.generation == generation else { return false }
            state.mailbox = mailbox
            return true
        }
        if !installed {
            WorkerSpawn.kill(process)
            return nil
        }
        // A worker that never says it is ready (the first start waits in ``start()``).
        let startTimer = group.next().scheduleTask(in: .init(Self.startTimeout)) { [self] in
            let stuck = state.withLock { state -> Bool in
                guard state.generation == generation, state.supervisor.isStartingUnwaited else { return false }
                state.killReason = "did not load the plugin within \(describe(Self.startTimeout))"
                return true
            }
            if stuck { WorkerSpawn.kill(process) }
        }
        let stillStarting = state.withLock { state -> Bool in
            guard state.generation == generation, case .starting = state.supervisor.phase else { return false }
            state.startTimer = startTimer
            return true
        }
        if !stillStarting { startTimer.cancel() }
        let start = WorkerSpawn.startFrame(manifest, library: library)
        // A worker that cannot be talked to is killed, and its end handled as any other.
        let maxFrameBytes = core.limits.maxFrameBytes
        ends.connect(on: loops) { [self] index in
            // A worker's frames are held to the clients' frame limit: one that sends more
            // breaks the framing, and is handled as crashed.
            WorkerLinkHandler(worker: self, generation: generation, link: index, maxFrameBytes: maxFrameBytes)
        }.whenSuccess { [self] links in
            guard let links else {
                logger.error("cannot talk to the worker process")
                WorkerSpawn.kill(process)
                return
            }
            let current = state.withLock { state -> Bool in
                guard state.generation == generation, !state.supervisor.shuttingDown else { return false }
                state.links = links
                return true
            }
            if current {
                links[0].send(start)
            } else {
                for link in links { link.channel.close(promise: nil) }
                WorkerSpawn.kill(process)
            }
        }
        return nil
    }

    /// Kills the worker of `generation` (if it is still that one) for `reason`; its end is
    /// then handled as a crash.
    func kill(generation: Int, reason: String?) {
        let process = state.withLock { state -> ChildProcess? in
            // Between a worker's end and the next start there is no process: nothing to kill,
            // and no reason to leave for the next worker's end.
            guard state.generation == generation, let process = state.process else { return nil }
            if let reason, state.killReason == nil { state.killReason = reason }
            return process
        }
        WorkerSpawn.kill(process)
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
        let how = WorkerSpawn.howEnded(process, killedFor: killed)
        let reason = "the service's worker process \(how)"
        let now = ContinuousClock.now
        let (opens, launches, links, ended) = state.withLock {
            state -> (
                [@Sendable (AppServiceConnectionStatus) -> Void], [@Sendable (LaunchOutcome) -> Void], [WorkerLink],
                WorkerSupervisor.Ended
            ) in
            guard state.generation == generation else { return ([], [], [], .nothing) }
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
            let ended = state.supervisor.workerEnded(how, at: now)
            // A first start that died while loading: its load fails with the reason.
            if case .startFailed(let ready) = ended { ready.signal() }
            return (opens, launches, links, ended)
        }
        for link in links { link.channel.close(promise: nil) }
        // Whoever waits on this worker hears at once, whatever comes next.
        for open in opens { open(.appUnavailable) }
        for launch in launches { launch(LaunchOutcome(status: .appUnavailable, error: reason)) }
        switch ended {
        case .nothing, .startFailed:
            return
        case .giveUp(let why):
            logger.error("worker process (pid \(process.processIdentifier)) \(how)")
            core.backendFailed(self, reason: reason)
            logger.error("package \(package) is given up: \(why)")
            core.backendLetGo()
        case .restart(let delay):
            logger.error("worker process (pid \(process.processIdentifier)) \(how)")
            core.backendFailed(self, reason: reason)
            logger.notice("restarting the worker in \(describe(delay))")
            DispatchQueue.global().asyncAfter(deadline: .now() + delay.seconds) { [self] in restart() }
        }
    }

    private func restart() {
        // The host may have shut down while the restart waited: then its core may be gone
        // (`core` is unowned), and there is nothing to restart.
        guard !state.withLock({ $0.supervisor.shuttingDown }) else { return }
        core.metrics?.restarted(package: package)
        // What the ended worker's links and tables held is given back a moment later.
        core.backendLetGo()
        if let error = launchWorker() {
            logger.error("the worker could not be restarted: \(error)")
            state.withLock { $0.supervisor.restartFailed(error) }
        }
    }
}
