import CAtriumSystem
import NIOCore
import NIOPosix

#if canImport(Glibc)
    import Glibc
#endif

/// The descriptors of a worker's links while it starts. A link per event loop of the host, each
/// a pipe toward the worker and one toward the host (a round trip over pipes costs less than
/// over a Unix socket: BENCHMARKS.md). The worker's standard input is one end of a socket pair,
/// which carries the worker's ends of every link over to it before anything else, and nothing
/// after.
///
/// Made, used and dropped by one thread while ``WorkerProcess`` starts a worker: every end is
/// this value's to close until the worker has its own (``passToWorker()``) and the host's have
/// become channels (``connect(on:makeHandler:)``).
struct WorkerLinkEnds {
    /// The socket pair: the host's end, then the worker's standard input.
    private let control: [Int32]
    /// For each link, the host's ends (it reads `input` and writes `output`), and a copy of
    /// `output` for the link to write directly (``WorkerLink``).
    private let hostEnds: [(input: Int32, output: Int32, copy: Int32)]
    /// For each link, the worker's ends, in the order they are passed: what it reads, what it
    /// writes; then the worker's end of the descriptor socket.
    private let workerEnds: [Int32]
    /// The host's end of the socket (SOCK_SEQPACKET) that carries files both ways (SCM_RIGHTS):
    /// a file the plugin offers, a finished upload handed to it.
    private let descriptorSocket: Int32

    /// The end of the socket pair that becomes the worker's standard input.
    var workerInput: Int32 { control[1] }

    /// Makes the ends of `links` links (what was made is closed when one cannot be).
    init(links: Int) throws(PluginLoadError) {
        var control: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &control) == 0 else {
            throw PluginLoadError(reason: "cannot make a socket pair for the worker: errno \(errno)")
        }
        var hostEnds: [(input: Int32, output: Int32, copy: Int32)] = []
        var workerEnds: [Int32] = []
        func closeMade() {
            for descriptor in control + hostEnds.flatMap({ [$0.input, $0.output, $0.copy] }) + workerEnds {
                close(descriptor)
            }
        }
        for _ in 0..<links {
            var towardWorker: [Int32] = [-1, -1]
            var towardHost: [Int32] = [-1, -1]
            guard atrium_make_pipe(&towardWorker) == 0 else {
                closeMade()
                throw PluginLoadError(reason: "cannot make a pipe for the worker: errno \(errno)")
            }
            let copy = fcntl(towardWorker[1], F_DUPFD_CLOEXEC, 3)
            guard copy >= 0, atrium_make_pipe(&towardHost) == 0 else {
                let error = errno
                for descriptor in towardWorker + (copy >= 0 ? [copy] : []) { close(descriptor) }
                closeMade()
                throw PluginLoadError(reason: "cannot make a pipe for the worker: errno \(error)")
            }
            hostEnds.append((input: towardHost[0], output: towardWorker[1], copy: copy))
            workerEnds += [towardWorker[0], towardHost[1]]
        }
        var files: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &files) == 0 else {
            let error = errno
            closeMade()
            throw PluginLoadError(reason: "cannot make the worker's descriptor socket: errno \(error)")
        }
        self.control = control
        self.hostEnds = hostEnds
        self.workerEnds = workerEnds + [files[1]]
        descriptorSocket = files[0]
    }

    /// The host's end of the descriptor socket, for the worker's ``DescriptorMailbox`` (which
    /// owns it from then on).
    func takeDescriptorSocket() -> Int32 { descriptorSocket }

    /// Closes every end: the worker did not start, or is not kept.
    func closeAll() {
        for descriptor in control + hostEnds.flatMap({ [$0.input, $0.output, $0.copy] }) + workerEnds
            + [descriptorSocket]
        {
            close(descriptor)
        }
    }

    /// Sends the worker its ends of the links over the socket pair, the only thing it carries,
    /// then closes them and the socket pair here. Returns whether they went; the host's ends
    /// are left open either way.
    func passToWorker() -> Bool {
        let passed = workerEnds.withUnsafeBufferPointer {
            atrium_send_descriptors(control[0], $0.baseAddress, Int32($0.count))
        }
        for descriptor in workerEnds + control { close(descriptor) }
        return passed == 0
    }

    /// Closes the host's ends: the worker did not get its own.
    func closeHostEnds() {
        for link in hostEnds {
            close(link.input)
            close(link.output)
            close(link.copy)
        }
    }

    /// Makes a channel of each link's host ends, link `n` on `loops[n]`, its frames read by the
    /// handler `makeHandler(n)` makes (on the loop, as the channel is set up). Succeeds, on
    /// `loops[0]`, with the links once every channel is made; with nil when one could not be,
    /// after closing the channels that were made and the ends no channel owns. Never fails.
    func connect(
        on loops: [any EventLoop], makeHandler: @escaping @Sendable (Int) -> WorkerLinkHandler
    ) -> EventLoopFuture<[WorkerLink]?> {
        // Which pipes the host's ends are, taken before NIO has them: NIO gives back the ends of
        // a channel it could not make, and closes those of one it made and then could not set
        // up. Only an end still on its own pipe is closed after a failure (a closed number may
        // be another's by then).
        let identities = hostEnds.map { (input: fileIdentity($0.input), output: fileIdentity($0.output)) }
        let ends = hostEnds
        // Nothing here waits: a restart may be made from anywhere. Each link lives on its loop.
        let connections = ends.enumerated().map { index, link in
            NIOPipeBootstrap(group: loops[index])
                .channelOption(
                    .writeBufferWaterMark,
                    value: .init(low: WorkerProcess.outputLowWater, high: WorkerProcess.outputHighWater)
                )
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(makeHandler(index))
                    }
                }
                // The channel owns both ends from here, and closes them when it closes.
                .takingOwnershipOfDescriptors(input: link.input, output: link.output)
        }
        return EventLoopFuture.whenAllComplete(connections, on: loops[0]).map { results -> [WorkerLink]? in
            let channels = results.compactMap { try? $0.get() }
            guard channels.count == results.count else {
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
                return nil
            }
            // Each link owns its copy from here.
            return zip(channels, ends).map { WorkerLink($0, descriptor: $1.copy) }
        }
    }
}

/// Which file `descriptor` is open on (its device and inode), or nil when it is not open.
private func fileIdentity(_ descriptor: Int32) -> [UInt64]? {
    var status = stat()
    guard fstat(descriptor, &status) == 0 else { return nil }
    return [UInt64(status.st_dev), UInt64(status.st_ino)]
}
