import AtriumProtocol
import AtriumTransfers
import AtriumValues
import CAtriumPlugin
import CAtriumSystem
import Foundation
public import Logging
import NIOConcurrencyHelpers
import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// The worker process's side: `atriumd --worker` runs this with a socket to the host as
/// standard input, which carries the worker's ends of its links to the host and nothing else:
/// one link per event loop of the host, so that a request never leaves its connection's loop on
/// the host's side, each a pipe to read and a pipe to write; each link gets a thread of the
/// worker's own that reads it (``WorkerPipes``).
/// Then the worker reads `start` (on link 0), sets its limits, loads the plugin through the
/// same C ABI as in process, answers `ready`, and carries calls both ways until the host says
/// `shutdown` or goes away. A channel's frames all travel on one link, in order.
public enum WorkerMain {
    /// Runs the worker with `links` links to the host; returns its exit status.
    public static func run(links: Int, logger: Logger) -> Int32 {
        // atriumd ignores SIGHUP (it reloads on it); a worker and what it starts do not.
        signal(SIGHUP, SIG_DFL)
        // A write to a closed pipe or socket is an error to the plugin (EPIPE), as in process
        // (where SwiftNIO has SIGPIPE ignored), and to the links' writers, not the worker's death.
        signal(SIGPIPE, SIG_IGN)
        var passed = [Int32](repeating: -1, count: Int(ATRIUM_MAX_PASSED_DESCRIPTORS))
        let count = atrium_receive_descriptors(0, &passed, Int32(passed.count))
        // Each link's two pipe ends, then the socket that carries files (SCM_RIGHTS).
        guard count >= 0, Int(count) == 2 * links + 1 else {
            logger.error("worker: expected \(2 * links + 1) descriptors from the host on standard input, got \(count)")
            return 70
        }
        // Standard input becomes /dev/null: a plugin that reads or writes it, or a program it
        // starts, reaches nothing of the host's.
        let null = open("/dev/null", O_RDWR)
        guard null >= 0, dup2(null, 0) == 0 else {
            logger.error("worker: cannot replace standard input (errno \(errno))")
            return 70
        }
        if null != 0 { close(null) }
        let pipes = (0..<links).map { WorkerPipes(input: passed[2 * $0], output: passed[2 * $0 + 1]) }
        let done = DispatchSemaphore(value: 0)
        let dispatcher = WorkerDispatcher(logger: logger, done: done, links: pipes.count)
        let host = WorkerHost(links: pipes, logger: logger)
        host.mailbox = DescriptorMailbox(socket: passed[2 * links])
        dispatcher.host = host
        // A thread per link reads it; the host closing any link ends the worker.
        for (index, link) in pipes.enumerated() {
            let thread = Thread {
                atrium_name_this_thread("atrium-link-\(index)")
                let failure = link.run(maxFrameBytes: Int(UInt32.max >> 1)) { frame in
                    dispatcher.received(frame, link: index)
                }
                if let failure { logger.error("worker: \(failure)") }
                dispatcher.finish(0)
            }
            thread.start()
        }
        done.wait()
        return dispatcher.exitStatus
    }
}

/// Hands the host's frames to the plugin.
final class WorkerDispatcher: @unchecked Sendable {
    let logger: Logger
    let done: DispatchSemaphore
    /// Set once, before any link is set up.
    var host: WorkerHost!
    /// Set by `start` (on link 0's thread); read from every link's thread.
    private let loaded = NIOLockedValueBox<InProcessPlugin?>(nil)
    private let status = NIOLockedValueBox<(exit: Int32, shutdowns: Int)>((0, 0))
    /// How many links the host says `shutdown` on before the plugin stops.
    private let links: Int

    init(logger: Logger, done: DispatchSemaphore, links: Int) {
        self.logger = logger
        self.done = done
        self.links = links
    }

    var exitStatus: Int32 { status.withLockedValue { $0.exit } }

    func finish(_ exit: Int32) {
        status.withLockedValue { $0.exit = exit }
        done.signal()
    }

    /// A frame from the host, on link `link` (answers go back on it).
    func received(_ frame: WorkerFrame, link: Int) {
        if case .start(let package, let library, let config, let concurrent, let memory, let files, let cpu, let user) =
            frame
        {
            start(package, library, config, concurrent, memory: memory, files: files, cpu: cpu, user: user)
            return
        }
        guard let plugin = loaded.withLockedValue({ $0 }) else {
            logger.error("worker: \(frame.type) before start")
            return
        }
        switch frame {
        case .open(let channel, let service, let clientId, let clientName, let isRemote):
            let host = self.host!
            host.opened(channel, on: link)
            plugin.open(
                ChannelInfo(
                    id: channel, service: service, clientId: clientId, clientName: clientName, isRemote: isRemote)
            ) { status in
                host.write(.opened(channel: channel, status: UInt64(max(status.rawValue, 0))), on: link)
            }
        case .request(let channel, let id, let message):
            host.received(id, on: link)
            plugin.request(id, on: channel, message: message.buffer)
        case .response(let channel, let id, let status, let message):
            plugin.response(
                to: id, on: channel, status: AppServiceResponseStatus(rawValue: Int(clamping: status)),
                message: message?.buffer)
        case .closed(let channel, let status, let by):
            host.closed(channel)
            plugin.closed(
                channel: channel, status: AppServiceClosedStatus(rawValue: Int(clamping: status)),
                by: ChannelCloser(rawValue: Int32(clamping: by)) ?? .host)
        case .launch(let call, let uri, let data, let clientId, let isRemote):
            let host = self.host!
            if host.launchingFromOwnQueue.withLockedValue({ $0 }) > 0 {
                host.write(
                    .launched(
                        call: call, status: UInt64(RemoteLaunchUriStatus.deniedByLocalSystem.rawValue),
                        reason:
                            "package \"\(plugin.package)\" launched its own scheme from inside one of its callbacks, where it would wait on itself"
                    ), on: link)
                return
            }
            let info = LaunchInfo(
                uri: uri, data: data.map { Array($0.buffer.readableBytesView) }, clientId: clientId, isRemote: isRemote)
            plugin.launch(info) { outcome in
                host.write(
                    .launched(call: call, status: UInt64(max(outcome.status.rawValue, 0)), reason: outcome.error),
                    on: link)
            }
        case .answered(let id):
            host.answeredByHost(id)
        case .reply(let call, _, _, _, _, _):
            host.replied(call, frame)
        case .upload(let delivery, let transfer, let size, let digest, let name, let service):
            // Its file came first on the descriptor socket, tagged with the delivery.
            guard let descriptor = host.mailbox?.take(delivery) else {
                logger.error("worker: the file of upload \(transfer) did not come with it")
                _ = host.uploadDone(
                    delivery, from: plugin, status: .failure, message: nil, error: "the file did not reach the worker")
                return
            }
            let handed = UploadDelivery(
                delivery: delivery, transfer: TransferID(transfer), descriptor: descriptor, size: size, digest: digest,
                name: name, package: plugin.package, service: service)
            switch plugin.upload(handed) {
            case .taken: break
            case .later(let why), .refused(let why):
                close(descriptor)
                _ = host.uploadDone(delivery, from: plugin, status: .failure, message: nil, error: why)
            }
        case .transferEnded(let transfer, let why):
            plugin.transferEnded(TransferID(transfer), why: why)
        case .shutdown:
            // Once every link has said so (each after what it carried), off the links' threads.
            let all = status.withLockedValue { status -> Bool in
                status.shutdowns += 1
                return status.shutdowns == links
            }
            guard all else { return }
            // A queue of its own: the wait below needs the shared pool's threads free.
            DispatchQueue(label: "atrium.worker.shutdown").async {
                _ = plugin.shutDown(within: .seconds(5))
                self.finish(0)
            }
        default:
            logger.notice("worker: unexpected \(frame.type) frame from the host; ignored")
        }
    }

    private func start(
        _ package: String, _ library: String, _ config: String, _ concurrent: Bool, memory: UInt64, files: UInt64,
        cpu: UInt64, user: String?
    ) {
        var logger = self.logger
        logger[metadataKey: "package"] = "\(package)"
        if memory > 0 {
            // Address space counts every mapping, the worker's own included: a limit below what
            // it already uses would only make the plugin fail to map, so it is refused plainly.
            let used = Self.addressSpaceBytes()
            guard memory >= used + 16 << 20 else {
                host.write(
                    .ready(
                        error:
                            "limits.memoryMB is \(memory >> 20), but the worker process already uses \(used >> 20) MiB of address space before loading the plugin; allow at least \((used >> 20) + 64)"
                    ), on: 0
                ) { self.finish(1) }
                return
            }
            setLimit(Int32(RLIMIT_AS.rawValue), memory, "memory")
        }
        if files > 0 { setLimit(Int32(RLIMIT_NOFILE.rawValue), files, "open files") }
        if cpu > 0 { setLimit(Int32(RLIMIT_CPU.rawValue), cpu, "CPU seconds") }
        do {
            if let user { try become(user) }
            // The host found and checked the library; here it is only opened.
            let folder = URL(fileURLWithPath: library).deletingLastPathComponent()
            let (_, descriptor, _) = try PluginLibrary.open(
                library, manifestFolder: folder, searchPath: [], strictModes: false)
            let plugin = InProcessPlugin(
                package: package, config: config, concurrent: concurrent, descriptor: descriptor, host: host,
                logger: logger)
            try plugin.create()
            loaded.withLockedValue { $0 = plugin }
            host.write(.ready(error: nil), on: 0)
        } catch {
            host.write(.ready(error: error.reason), on: 0) { self.finish(1) }
        }
    }

    /// Runs the rest of the worker as `user`: its group, no supplementary groups, its uid, in
    /// that order (after setuid nothing else may change).
    private func become(_ user: String) throws(PluginLoadError) {
        guard let entry = getpwnam(user) else {
            throw PluginLoadError(reason: "there is no user \"\(user)\" on this machine")
        }
        let (uid, gid) = (entry.pointee.pw_uid, entry.pointee.pw_gid)
        guard geteuid() == 0 || geteuid() == uid else {
            throw PluginLoadError(
                reason: "atriumd does not run as root, so its worker cannot run as \"\(user)\" (the manifest's user)")
        }
        guard setgroups(0, nil) == 0 || geteuid() == uid, setgid(gid) == 0, setuid(uid) == 0, getuid() == uid else {
            throw PluginLoadError(reason: "the worker could not become \"\(user)\": errno \(errno)")
        }
    }

    /// The process's address space now, in bytes (the first field of /proc/self/statm).
    static func addressSpaceBytes() -> UInt64 {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
            let pages = text.split(separator: " ").first.flatMap({ UInt64($0) })
        else { return 0 }
        return pages * UInt64(sysconf(Int32(_SC_PAGESIZE)))
    }

    private func setLimit(_ resource: Int32, _ value: UInt64, _ name: String) {
        // The CPU limit's hard value is a second above the soft one: the kernel sends SIGXCPU at
        // the soft limit (which the log then names), and SIGKILL only at the hard one.
        let hard = resource == Int32(RLIMIT_CPU.rawValue) ? value + 1 : value
        var limit = rlimit(rlim_cur: rlim_t(value), rlim_max: rlim_t(hard))
        if setrlimit(resource, &limit) != 0 {
            logger.warning("worker: could not set the \(name) limit to \(value): errno \(errno)")
        }
    }
}
