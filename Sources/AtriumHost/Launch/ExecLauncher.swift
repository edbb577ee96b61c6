import Foundation
import Logging
import Synchronization

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
    func run(uri: String, logger: Logger) -> LaunchOutcome {
        guard let executable = executable() else {
            return LaunchOutcome(
                status: .appUnavailable, error: "the program \(command[0]) was not found or is not executable")
        }
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments(for: uri)
        process.standardInput = FileHandle.nullDevice
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        let name = executable.lastPathComponent
        output.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            guard !data.isEmpty else {
                handle.readabilityHandler = nil
                return
            }
            for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
                logger.info("\(name): \(line)")
            }
        }
        let finished = DispatchSemaphore(value: 0)
        process.terminationHandler = { ended in
            logger.info("\(name) (pid \(ended.processIdentifier)) ended with status \(ended.terminationStatus)")
            RunningPrograms.shared.remove(ended)
            finished.signal()
        }
        do {
            try process.run()
        } catch {
            return LaunchOutcome(
                status: .appUnavailable, error: "cannot start \(executable.path): \(error.localizedDescription)")
        }
        RunningPrograms.shared.add(process)
        logger.info("started \(executable.path) (pid \(process.processIdentifier)) for \(uri)")
        guard wait else { return LaunchOutcome(status: .success, error: nil) }

        if finished.wait(timeout: .now() + timeoutSeconds) == .timedOut {
            process.terminate()
            if finished.wait(timeout: .now() + 1) == .timedOut {
                kill(process.processIdentifier, SIGKILL)
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

/// Programs started and not yet ended: held so that each is watched (and reaped) to its end.
final class RunningPrograms: Sendable {
    static let shared = RunningPrograms()
    private let running = Mutex<[ObjectIdentifier: ProcessBox]>([:])

    struct ProcessBox: @unchecked Sendable {
        let process: Process
    }

    func add(_ process: Process) {
        running.withLock { $0[ObjectIdentifier(process)] = ProcessBox(process: process) }
    }

    func remove(_ process: Process) {
        _ = running.withLock { $0.removeValue(forKey: ObjectIdentifier(process)) }
    }
}
