import CAtriumSystem
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A program the host starts (a worker process, a launch's handler): `posix_spawn` in a
/// session of its own, reaped by a thread of its own that waits for exactly its pid (and
/// then runs `onExit`).
///
/// Foundation's `Process` is not used for these: with a termination handler, every `Process`
/// stays in memory after its program ends, about 6 KB each with its environment (measured on
/// this toolchain), which a host restarting workers or starting handlers all day cannot afford.
final class ChildProcess: Sendable {
    enum TerminationReason: Sendable {
        case exit
        case uncaughtSignal
    }

    let processIdentifier: Int32
    private let ended = Mutex<(reason: TerminationReason, status: Int32)?>(nil)

    /// Starts `executable`; `onExit` runs on the reaping thread once it has ended. With
    /// `killGroupWhenItEnds`, what it started (its process group) is killed as it ends, while
    /// its pid cannot yet be anyone else's.
    init(
        executable: URL, arguments: [String], environment: [String: String], input: Int32 = -1,
        output: Int32 = -1, error: Int32 = -1, killGroupWhenItEnds: Bool = false,
        onExit: @escaping @Sendable (ChildProcess) -> Void
    ) throws(SpawnError) {
        let argv = [executable.path] + arguments
        let envp = environment.map { "\($0.key)=\($0.value)" }
        let pid = Self.withCStrings(argv) { argv in
            Self.withCStrings(envp) { envp in
                atrium_spawn(executable.path, argv, envp, input, output, error)
            }
        }
        guard pid > 0 else { throw SpawnError(errno: -pid) }
        processIdentifier = pid
        Self.detachThread { [self] in
            // Until it is reaped its pid stays its own (a zombie's): the group is killed, and
            // ``signal(_:group:)`` signals, only in that time.
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) < 0, errno == EINTR {}
            if killGroupWhenItEnds { kill(-pid, SIGKILL) }
            ended.withLock { ended in
                var status: Int32 = 0
                while waitpid(pid, &status, 0) < 0, errno == EINTR {}
                // WIFSIGNALED / WTERMSIG / WEXITSTATUS, which Swift does not import.
                let signal = status & 0x7F
                ended = signal != 0 && signal != 0x7F ? (.uncaughtSignal, signal) : (.exit, (status >> 8) & 0xFF)
            }
            onExit(self)
        }
    }

    private final class Body: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    /// Runs `body` on a detached thread of its own (a plain pthread: nothing of it stays
    /// once it returns).
    private static func detachThread(_ body: @escaping @Sendable () -> Void) {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        pthread_attr_setstacksize(&attributes, 1 << 20)
        let context = Unmanaged.passRetained(Body(body)).toOpaque()
        var thread = pthread_t()
        let created = pthread_create(
            &thread, &attributes,
            { context in
                Unmanaged<Body>.fromOpaque(context!).takeRetainedValue().run()
                return nil
            }, context)
        if created != 0 {
            // No thread to spare: one of Dispatch's waits for the pid instead.
            let body = Unmanaged<Body>.fromOpaque(context).takeRetainedValue()
            DispatchQueue.global().async { body.run() }
        }
    }

    struct SpawnError: Error, CustomStringConvertible {
        let errno: Int32
        var description: String { String(cString: strerror(errno)) }
    }

    var isRunning: Bool { ended.withLock { $0 == nil } }
    /// How it ended (`.exit` until then).
    var terminationReason: TerminationReason { ended.withLock { $0?.reason ?? .exit } }
    /// Its exit status, or the signal that ended it.
    var terminationStatus: Int32 { ended.withLock { $0?.status ?? 0 } }

    /// Sends `signal` to the program (or to its whole process group, which it leads), unless
    /// it has been reaped: a pid is never signalled once it may be someone else's.
    func signal(_ signal: Int32, group: Bool = false) {
        ended.withLock { ended in
            guard ended == nil else { return }
            kill(group ? -processIdentifier : processIdentifier, signal)
        }
    }

    private static func withCStrings<Result>(
        _ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> Result
    ) -> Result {
        let copies = strings.map { strdup($0) } + [nil]
        defer { for copy in copies { free(copy) } }
        return copies.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
