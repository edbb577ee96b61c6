import AtriumProtocol
import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A program that handles a package's URI schemes (`"launch": {"exec": [...]}` in its
/// manifest), started directly, never through a shell: the URI is one argument, whatever
/// characters it holds.
public struct ExecLauncher: Sendable, Hashable {
    /// The program, then its arguments; `{uri}` in an argument stands for the URI.
    public var command: [String]
    /// Whether to wait for the program (for hand-off launchers such as `xdg-open`): then a
    /// non-zero exit or running past the time limit is a failed launch. Otherwise the launch
    /// succeeds once the program has started, and it runs on by itself.
    public var wait: Bool
    public var timeoutSeconds: Double

    public init(command: [String], wait: Bool = false, timeoutSeconds: Double = 10) {
        self.command = command
        self.wait = wait
        self.timeoutSeconds = timeoutSeconds
    }

    /// The arguments for `uri`.
    func arguments(for uri: String) -> [String] {
        command.dropFirst().map { $0.replacingOccurrences(of: "{uri}", with: uri) }
    }

    /// The variables a handler program gets: only those a desktop program needs to find the
    /// user's session, display, locale and files. The rest of the host's environment (tokens,
    /// credentials, whatever its service manager set) stays with the host.
    static func environment(from host: [String: String]) -> [String: String] {
        host.filter { name, _ in passedVariables.contains(name) || name.hasPrefix("LC_") }
    }

    static let passedVariables: Set<String> = [
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY",
        "XDG_RUNTIME_DIR", "XDG_SESSION_TYPE", "XDG_CURRENT_DESKTOP", "XDG_DATA_HOME", "XDG_CONFIG_HOME",
        "XDG_DATA_DIRS", "XDG_CONFIG_DIRS", "DBUS_SESSION_BUS_ADDRESS",
    ]

    /// The program's path: as written when it holds a '/', else found on PATH.
    func executable() -> URL? {
        let program = command[0]
        if program.contains("/") {
            return FileManager.default.isExecutableFile(atPath: program) ? URL(fileURLWithPath: program) : nil
        }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for folder in path.split(separator: ":") {
            let candidate = URL(fileURLWithPath: String(folder)).appendingPathComponent(program)
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        return nil
    }

    /// Starts the program for `uri` (and, with `wait`, waits for it). Blocks: call it off the
    /// event loop. The program's output goes to the log; it is reaped when it ends.
    ///
    /// At most `maxRunning` programs started for launches run at once: a launch past that is
    /// refused (status 7), since a program that does not wait for its handler would otherwise
    /// let clients start processes without end.
    func run(uri: String, logger: Logger, maxRunning: Int) -> LaunchOutcome {
        guard RunningPrograms.shared.count < maxRunning else {
            return LaunchOutcome(
                status: .deniedByRemoteSystem,
                error: "\(maxRunning) programs started for launches are still running, the limit (--max-launches)")
        }
        guard let executable = executable() else {
            return LaunchOutcome(
                status: .appUnavailable, error: "the program \(command[0]) was not found or is not executable")
        }
        // The program's output goes to the log through a pipe the event loop reads, which
        // closes it when the program (and whatever inherited it) is done with it.
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else {
            return LaunchOutcome(status: .appUnavailable, error: "cannot make a pipe for \(command[0])'s output")
        }
        // Neither end may leak into other programs the host starts meanwhile.
        _ = fcntl(ends[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(ends[1], F_SETFD, FD_CLOEXEC)
        let name = executable.lastPathComponent
        let finished = DispatchSemaphore(value: 0)
        RunningPrograms.shared.add()
        let process: ChildProcess
        do {
            process = try ChildProcess(
                executable: executable, arguments: arguments(for: uri),
                environment: Self.environment(from: ProcessInfo.processInfo.environment), output: ends[1],
                error: ends[1]
            ) { ended in
                logger.info("\(name) (pid \(ended.processIdentifier)) ended with status \(ended.terminationStatus)")
                RunningPrograms.shared.remove()
                finished.signal()
            }
        } catch {
            RunningPrograms.shared.remove()
            close(ends[0])
            close(ends[1])
            return LaunchOutcome(status: .appUnavailable, error: "cannot start \(executable.path): \(error)")
        }
        close(ends[1])  // the program has its own copy
        OutputLog.attach(ends[0], name: name, logger: logger)
        logger.info("started \(executable.path) (pid \(process.processIdentifier)) for \(untrusted(uri))")
        guard wait else { return LaunchOutcome(status: .success, error: nil) }

        if finished.wait(timeout: .now() + timeoutSeconds) == .timedOut {
            // The program leads a process group of its own: what it started goes with it.
            process.signal(SIGTERM, group: true)
            if finished.wait(timeout: .now() + 1) == .timedOut {
                process.signal(SIGKILL, group: true)
                _ = finished.wait(timeout: .now() + 1)
            }
            return LaunchOutcome(
                status: .unknown, error: "\(name) did not finish within \(timeoutSeconds) s and was killed")
        }
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            let how = process.terminationReason == .exit ? "exited with status" : "was killed by signal"
            return LaunchOutcome(status: .unknown, error: "\(name) \(how) \(process.terminationStatus)")
        }
        return LaunchOutcome(status: .success, error: nil)
    }
}

/// How many programs started for launches are still running (each is reaped by its
/// ``ChildProcess``): what `--max-launches` counts.
final class RunningPrograms: Sendable {
    static let shared = RunningPrograms()
    private let running = Atomic<Int>(0)

    /// One more started (counted before it starts: one that ends at once is not counted after
    /// its end was).
    func add() { running.wrappingAdd(1, ordering: .relaxed) }

    /// One ended, or never started.
    func remove() { running.wrappingSubtract(1, ordering: .relaxed) }

    /// How many are running.
    var count: Int { running.load(ordering: .relaxed) }
}

/// Logs what a launched program writes, line by line, at most ``maxLines`` lines of at most
/// ``maxLineBytes`` bytes each (a program cannot flood the log), then reads on and drops
/// the rest until the pipe closes.
final class OutputLog: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    static let maxLines = 100
    static let maxLineBytes = 2048

    let name: String
    let logger: Logger
    private var line: [UInt8] = []
    private var lines = 0

    init(name: String, logger: Logger) {
        self.name = name
        self.logger = logger
    }

    /// Reads `descriptor` (the read end of a pipe, which this takes over and closes) on an
    /// event loop.
    static func attach(_ descriptor: Int32, name: String, logger: Logger) {
        NIOPipeBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(OutputLog(name: name, logger: logger))
                }
            }
            .takingOwnershipOfDescriptor(input: descriptor)
            .whenFailure { error in
                logger.warning("cannot read the output of \(name): \(error)")
                close(descriptor)
            }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        for byte in buffer.readableBytesView {
            if byte == UInt8(ascii: "\n") {
                emit()
            } else if line.count < Self.maxLineBytes {
                line.append(byte)
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !line.isEmpty { emit() }
        context.fireChannelInactive()
    }

    private func emit() {
        defer { line.removeAll(keepingCapacity: true) }
        lines += 1
        if lines <= Self.maxLines {
            logger.info("\(name): \(untrusted(String(decoding: line, as: UTF8.self), limit: Self.maxLineBytes))")
        } else if lines == Self.maxLines + 1 {
            logger.info("\(name): (more output, not logged)")
        }
    }
}
