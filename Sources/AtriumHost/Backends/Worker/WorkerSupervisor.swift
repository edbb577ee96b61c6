import Dispatch

/// Whether a package's worker runs, and what follows when it ends: a new worker after a delay
/// that doubles with each crash (0.25 s, 0.5 s, 1 s, ... up to 30 s), or, after ``maxCrashes``
/// crashes within ``crashWindow``, the package given up: failed, with the reason, until it is
/// reloaded or the host restarts. It also decides whether the next worker runs with Swift's
/// crash backtracer.
///
/// Plain state, with no I/O and no clock of its own: ``WorkerProcess`` holds it under its lock,
/// passes it the time, and does what its methods return (signal the first start's waiter, log,
/// schedule the restart).
struct WorkerSupervisor {
    static let maxCrashes = 5
    static let crashWindow = Duration.seconds(60)

    enum Phase {
        /// Started, `ready` not yet received.
        case starting
        case running
        /// Down, a new worker due at the time set.
        case restarting(reason: String)
        /// Given up on, or shut down.
        case failed(reason: String)
    }

    private(set) var phase = Phase.starting
    /// When the workers crashed; those older than ``crashWindow`` are dropped at the next crash.
    private var crashes: [ContinuousClock.Instant] = []
    /// Set when the package is stopped: no worker starts after it.
    private(set) var shuttingDown = false
    /// The first start, waited for by ``WorkerProcess/start()``.
    private var ready: DispatchSemaphore?
    /// Why the first start failed, for its waiter.
    private(set) var startError: String?

    /// How the package is doing, for the operator; `pid` is the running worker's.
    func health(pid: Int32?, at now: ContinuousClock.Instant) -> BackendHealth {
        let recent = crashes.filter { now - $0 < Self.crashWindow }.count
        switch phase {
        case .starting: return BackendHealth(state: .starting, pid: pid, recentCrashes: recent)
        case .running: return BackendHealth(state: .ready, pid: pid, recentCrashes: recent)
        case .restarting(let reason):
            return BackendHealth(state: .restarting, reason: reason, recentCrashes: recent)
        case .failed(let reason): return BackendHealth(state: .failed, reason: reason, recentCrashes: recent)
        }
    }

    /// Whether a worker is starting with no ``WorkerProcess/start()`` waiting for it (a
    /// restart): such a start is the start timer's to end when it never says `ready`, while the
    /// first start's waiter gives the package up itself.
    var isStartingUnwaited: Bool {
        guard case .starting = phase else { return false }
        return ready == nil
    }

    /// Whether the next worker runs with Swift's crash backtracer: not after a crash within
    /// ``crashWindow``.
    ///
    /// The backtracer says where a plugin crashed (the crashed thread, file and line), as it
    /// does for a plugin in the host's own process; its output reaches the log with the
    /// worker's. It holds a crashed worker for a second or so while it symbolicates, which
    /// delays the answers to requests in flight and the restart: so a worker that follows a
    /// crash in the last minute runs without it, and a crash loop restarts at its own pace.
    func backtraces(at now: ContinuousClock.Instant) -> Bool {
        !crashes.contains { now - $0 < Self.crashWindow }
    }

    /// The first start is waited for on `ready`, which is signalled once it said it is ready,
    /// or ended (``startError`` then says why).
    mutating func awaitFirstStart(_ ready: DispatchSemaphore) {
        self.ready = ready
    }

    /// A worker is about to start. False when the package is shutting down: none starts then.
    mutating func starting() -> Bool {
        guard !shuttingDown else { return false }
        phase = .starting
        return true
    }

    /// What the worker's `ready` leads to.
    enum Loaded {
        /// It was not starting (a second `ready`): nothing changed.
        case unexpected
        /// Its start is over, running or failed; `waiter` is the first start's, to be signalled
        /// (nil for a restart).
        case started(waiter: DispatchSemaphore?)
    }

    /// The worker said its plugin loaded, or (`failure`) why it did not: the package then fails
    /// with that reason.
    mutating func loaded(failure: String?) -> Loaded {
        guard case .starting = phase else { return .unexpected }
        if let failure {
            startError = failure
            phase = .failed(reason: failure)
        } else {
            phase = .running
        }
        let waiter = ready
        ready = nil
        return .started(waiter: waiter)
    }

    /// The package is given up for `reason` (its first start failed): no restart follows.
    mutating func giveUp(_ reason: String) {
        phase = .failed(reason: reason)
        ready = nil
    }

    /// A restart could not start a worker: the package fails with `reason`, unless it is
    /// being stopped.
    mutating func restartFailed(_ reason: String) {
        if !shuttingDown { phase = .failed(reason: reason) }
    }

    /// The package is stopped: no worker starts after this, and the next end is no crash.
    mutating func shutDown() {
        shuttingDown = true
    }

    /// What a worker's end leads to.
    enum Ended {
        /// Nothing: the package was stopped, or had failed already.
        case nothing
        /// The first start failed: its waiter is to be signalled (it reads ``startError``).
        case startFailed(waiter: DispatchSemaphore)
        /// A crash: a new worker is due after `delay`.
        case restart(after: Duration)
        /// A crash too many: the package is given up, for `reason`.
        case giveUp(reason: String)
    }

    /// The worker ended at `now`; `how` says how ("exited with status 1"), for the reasons.
    mutating func workerEnded(_ how: String, at now: ContinuousClock.Instant) -> Ended {
        if shuttingDown {
            phase = .failed(reason: "the package was stopped")
            return .nothing
        }
        if case .failed = phase { return .nothing }
        if case .starting = phase, let waiter = ready {
            // It died while loading: the load fails with the reason.
            let reason = startError ?? "the worker process \(how) while loading the plugin"
            startError = reason
            phase = .failed(reason: reason)
            ready = nil
            return .startFailed(waiter: waiter)
        }
        crashes = crashes.filter { now - $0 < Self.crashWindow } + [now]
        guard crashes.count < Self.maxCrashes else {
            let reason =
                "its worker process crashed \(crashes.count) times within \(describe(Self.crashWindow)); it stays unavailable until it is reloaded or the host restarts"
            phase = .failed(reason: reason)
            return .giveUp(reason: reason)
        }
        phase = .restarting(reason: "its worker process \(how); it is being restarted")
        return .restart(after: .milliseconds(min(250 << (crashes.count - 1), 30_000)))
    }
}
