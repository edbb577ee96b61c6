import AtriumProtocol
import CAtriumSystem
import Foundation
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// One start of a worker process: its environment, the pipe its output reaches the log
/// through, the spawn itself (a ``ChildProcess``, in a process group of its own), and the
/// `start` frame that says which plugin it loads, with which limits and as which user. Once the
/// process has ended, ``howEnded(_:killedFor:)`` says how, for the log. The links the worker is
/// talked to over are ``WorkerLinkEnds``'.
///
/// Made, run and dropped by one thread while ``WorkerProcess`` starts a worker: the output
/// pipe's ends are this value's until ``started(_:logger:)`` or ``cancel()``.
struct WorkerSpawn {
    private let executable: URL
    /// How many links the worker gets (``WorkerLinkEnds``).
    private let links: Int
    private let environment: [String: String]
    /// The pipe the worker's output goes through: the host reads `[0]`, the worker writes `[1]`.
    private let output: [Int32]

    /// Makes the worker's environment and the pipe for its output; `backtraces`: whether Swift's
    /// crash backtracer runs in it (``WorkerSupervisor/backtraces(at:)``).
    init(executable: URL, links: Int, backtraces: Bool) throws(PluginLoadError) {
        self.executable = executable
        self.links = links
        // glibc reserves 64 MiB of address space per thread's malloc arena: two arenas keep a
        // worker's address space, which its memory limit counts, near what it really uses.
        var environment = ProcessInfo.processInfo.environment
        environment["MALLOC_ARENA_MAX"] = "2"
        // The host's environment decides when it sets SWIFT_BACKTRACE.
        environment["SWIFT_BACKTRACE"] =
            environment["SWIFT_BACKTRACE"]
            ?? (backtraces
                ? "enable=yes,interactive=no,color=no,threads=crashed,registers=none,images=none,symbolicate=fast,limit=24,top=8"
                : "enable=no")
        self.environment = environment
        // What the worker (its plugin included) prints goes to the host's log through a pipe,
        // escaped, cut and counted as a program's output is: never raw into the log.
        var output: [Int32] = [-1, -1]
        guard atrium_make_pipe(&output) == 0 else {
            throw PluginLoadError(reason: "cannot make a pipe for the worker's output: errno \(errno)")
        }
        self.output = output
    }

    /// Starts the worker process with `input` (the worker's end of the control socket) as its
    /// standard input; `onExit` runs once it has ended (``ChildProcess``). When it cannot
    /// start, nothing is closed: that is ``cancel()``'s.
    func run(input: Int32, onExit: @escaping @Sendable (ChildProcess) -> Void) throws(PluginLoadError)
        -> ChildProcess
    {
        do {
            // The control socket's end becomes the worker's standard input.
            return try ChildProcess(
                executable: executable, arguments: ["--worker", "--worker-links", "\(links)"],
                environment: environment, input: input, output: output[1], error: output[1],
                // What the plugin started goes with its worker.
                killGroupWhenItEnds: true, onExit: onExit)
        } catch {
            throw PluginLoadError(reason: "cannot start the worker process (\(executable.path)): \(error)")
        }
    }

    /// Closes the output pipe, of a worker that did not start (or is not kept).
    func cancel() {
        close(output[0])
        close(output[1])
    }

    /// The worker runs: the host's copy of the pipe's writing end is closed, so that the pipe
    /// ends with the worker, and its reading end goes to the log.
    func started(_ process: ChildProcess, logger: Logger) {
        close(output[1])
        logger.info("worker process started (pid \(process.processIdentifier))")
        OutputLog.attach(output[0], name: "worker \(process.processIdentifier)", logger: logger)
    }

    /// The first frame a worker gets, on its first link: the plugin to load and its
    /// configuration, and the limits and user the worker puts itself under before it loads it
    /// (``WorkerMain``).
    static func startFrame(_ manifest: Manifest, library: URL) -> WorkerFrame {
        let limits = manifest.workerLimits
        return WorkerFrame.start(
            package: manifest.package, library: library.path, config: manifest.configJSON,
            concurrent: manifest.concurrent, memoryBytes: UInt64(limits.memoryMB ?? 0) << 20,
            openFiles: UInt64(limits.openFiles ?? 0), cpuSeconds: UInt64(limits.cpuSeconds ?? 0),
            user: manifest.workerUser)
    }

    /// SIGKILL for a worker process that runs, and everything it started (a worker leads a
    /// process group of its own); never for one that did not start: its pid would be 0, the
    /// host's own group.
    static func kill(_ process: ChildProcess?) {
        process?.signal(SIGKILL, group: true)
    }

    /// How `process` ended, for the log and for the reason its package's work fails with:
    /// `killedFor` is the host's reason when the host killed it.
    static func howEnded(_ process: ChildProcess, killedFor reason: String?) -> String {
        reason.map { "\($0) and was killed" }
            ?? (process.terminationReason == .uncaughtSignal
                ? "was killed by signal \(process.terminationStatus) (\(signalName(process.terminationStatus)))"
                : "exited with status \(process.terminationStatus)")
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
