import AtriumProtocol
import AtriumTransfers
import AtriumValues
import CAtriumSystem
import Foundation
import Logging
import NIOCore
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
/// with each crash (0.25 s up to 30 s), and after ``WorkerSupervisor/maxCrashes`` crashes within
/// ``WorkerSupervisor/crashWindow`` it gives the package up: `open` answers AppUnavailable (2)
/// with the reason until the package is reloaded or the host restarts.
///
/// The parts, each in a file of its own: ``WorkerLinkEnds`` makes the links' pipes and channels,
/// ``WorkerLink`` writes to a link and ``WorkerLinkHandler`` reads from it (the frames read go to
/// `WorkerProcess+Frames.swift`); ``WorkerSpawn`` starts the process and says how it ended;
/// ``WorkerSupervisor`` decides what a worker's end leads to. `WorkerProcess+Lifecycle.swift`
/// ties them together for each start; this file holds the state they share, under one lock,
/// and the seam's calls.
final class WorkerProcess: ServiceBackend, Sendable {
    let package: String
    let library: URL
    let manifest: Manifest
    unowned let core: HostCore
    let logger: Logger
    let executable: URL
    let group: any EventLoopGroup
    /// The host's event loops: the worker gets a link on each.
    let loops: [any EventLoop]

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

    struct State {
        /// Whether the worker runs, its crashes, and what its end leads to.
        var supervisor = WorkerSupervisor()
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
        /// Set when the host killed the worker: the reason it gives.
        var killReason: String?
        /// Kills a start that never says `ready`; cancelled when it does, so that it does not
        /// hold this backend for the rest of ``startTimeout`` (a reload retires it meanwhile).
        var startTimer: Scheduled<Void>?
        /// The links over their high-water mark.
        var blocked: Set<Int> = []
        /// The file at the library's path when the latest worker began, which it loads.
        var libraryFile: PluginLibrary.FileIdentity?
        /// Where files cross to and from this generation of the worker (SCM_RIGHTS).
        var mailbox: DescriptorMailbox?
    }

    let state = Mutex(State())
    /// Requests (and opens) timed out since the worker last answered one. Counted up and reset
    /// at a worker's end under `state`'s lock; an answer resets it without the lock (and only
    /// when a timeout has counted since), so answers take no lock for it.
    let silentTimeouts = Atomic<Int>(0)

    var health: BackendHealth {
        state.withLock { state in
            state.supervisor.health(pid: state.process?.processIdentifier, at: ContinuousClock.now)
        }
    }

    /// The library file at its path when the latest worker began (which it loads, unless
    /// the file changes while it starts), or nil when none was there.
    var libraryFile: PluginLibrary.FileIdentity? { state.withLock { $0.libraryFile } }

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
        loops = Array(Array(group.makeIterator()).prefix((Int(ATRIUM_MAX_PASSED_DESCRIPTORS) - 1) / 2))
        var logger = logger
        logger[metadataKey: "package"] = "\(manifest.package)"
        self.logger = logger
    }

    // MARK: Which link

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
        switch state.supervisor.phase {
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
            guard case .running = state.supervisor.phase, state.links.indices.contains(index),
                !state.blocked.contains(index)
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
            guard case .running = state.supervisor.phase, let link = state.links.first, !state.blocked.contains(0)
            else { return nil }
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

    /// A finished upload for the worker's plugin: its file crosses on the descriptor socket,
    /// then the frame that names it; the host's copy of the descriptor is closed here once sent.
    func upload(_ delivery: UploadDelivery) -> DeliveryVerdict {
        let taken = state.withLock { state -> (WorkerLink, DescriptorMailbox)? in
            guard case .running = state.supervisor.phase, let link = state.links.first, let mailbox = state.mailbox,
                !state.blocked.contains(0)
            else { return nil }
            return (link, mailbox)
        }
        guard let (link, mailbox) = taken else { return .later("its worker process is not running") }
        guard mailbox.send(delivery.descriptor, tag: delivery.delivery) else {
            return .later("its worker process does not take files now")
        }
        close(delivery.descriptor)
        link.send(
            .upload(
                delivery: delivery.delivery, transfer: delivery.transfer.uuid, size: delivery.size,
                digest: delivery.digest, name: delivery.name, service: delivery.service))
        return .taken
    }

    func transferEnded(_ transfer: TransferID, why: String) {
        if case .success(let link) = running(link: 0, newWork: false) {
            link.send(.transferEnded(transfer: transfer.uuid, why: why))
        }
    }

    func shutDown(within timeout: Duration) -> Bool {
        let (links, process) = state.withLock { state -> ([WorkerLink], ChildProcess?) in
            state.supervisor.shutDown()
            return (state.links, state.process)
        }
        guard let process else { return true }
        if !links.isEmpty {
            // On every link, behind what each carries (the channels' `closed` among them): the
            // worker stops the plugin once all of them said so.
            for link in links { link.send(.shutdown) }
        } else {
            // Still connecting: there is no one to tell.
            WorkerSpawn.kill(process)
        }
        let deadline = ContinuousClock.now + timeout
        while process.isRunning, ContinuousClock.now < deadline { usleep(10_000) }
        if process.isRunning {
            WorkerSpawn.kill(process)
            return false
        }
        return true
    }
}
