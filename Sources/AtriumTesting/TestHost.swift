public import Foundation
import Glibc

/// A real `atriumd`, started as its own process on port 0 with a manifests folder of the
/// test's choosing, for end-to-end tests. Stop it with ``stop(signal:)``; a host left
/// running is killed when the object goes away.
public final class TestHost: @unchecked Sendable {
    public let process: Process
    /// The TCP port it bound.
    public let port: Int
    /// Its local Unix socket.
    public let socketPath: String
    public let manifestsFolder: URL
    /// Where the host keeps its identity (`--state-dir`).
    public let stateFolder: URL
    private let output: OutputCollector

    /// The folder `swift build` put the executables and plugin libraries in: the test
    /// binary's own folder.
    public static var buildFolder: URL {
        let path =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var folder = URL(fileURLWithPath: path).deletingLastPathComponent()
        // On macOS the test binary sits inside an .xctest bundle.
        while folder.pathExtension == "xctest" || folder.lastPathComponent == "MacOS"
            || folder.lastPathComponent == "Contents"
        {
            folder.deleteLastPathComponent()
        }
        return folder
    }

    public struct StartError: Error, CustomStringConvertible {
        public var description: String
    }

    /// Writes `manifests` (file name → JSON text) to a fresh folder and starts a host on it.
    public static func start(
        manifests: [String: String],
        arguments: [String] = [],
        environment: [String: String] = [:],
        descriptorLimit: Int? = nil,
        executable: URL? = nil,
        readyWithin seconds: Double = 20
    ) async throws -> TestHost {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-test-\(UUID().uuidString)")
        try writeManifests(manifests, to: folder)
        return try await start(
            manifestsFolder: folder, arguments: arguments, environment: environment, descriptorLimit: descriptorLimit,
            executable: executable, readyWithin: seconds)
    }

    /// Writes `manifests` (file name → JSON text) into `folder`, made if missing.
    public static func writeManifests(_ manifests: [String: String], to folder: URL) throws {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for (name, json) in manifests {
            try json.write(to: folder.appendingPathComponent(name), atomically: true, encoding: .utf8)
        }
    }

    /// Starts `atriumd --manifests FOLDER --listen 127.0.0.1:0 --socket <temp>` and waits
    /// until it says it is ready. With `descriptorLimit`, the host runs under that
    /// RLIMIT_NOFILE, soft and hard (set by `sh -c 'ulimit -n N'` before it starts); with
    /// `executable`, that program runs instead of the build's `atriumd`; `readyWithin`: how long
    /// it may take.
    public static func start(
        manifestsFolder: URL,
        arguments: [String] = [],
        environment: [String: String] = [:],
        descriptorLimit: Int? = nil,
        executable: URL? = nil,
        readyWithin seconds: Double = 20
    ) async throws -> TestHost {
        let executable = executable ?? buildFolder.appendingPathComponent("atriumd")
        guard FileManager.default.isExecutableFile(atPath: executable.path) else {
            throw StartError(
                description: "\(executable.path) is missing: run `swift build` before the tests (Scripts/test.sh does)")
        }
        let socket = FileManager.default.temporaryDirectory.appendingPathComponent(
            "atrium-\(UUID().uuidString.prefix(8)).sock"
        ).path
        // A state folder of its own (the host's identity), unless the test names one.
        let stateFolder =
            arguments.firstIndex(of: "--state-dir").flatMap {
                arguments.indices.contains($0 + 1) ? arguments[$0 + 1] : nil
            }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent(
                "atrium-state-\(UUID().uuidString.prefix(8))"
            ).path
        let process = Process()
        let hostArguments =
            ["--manifests", manifestsFolder.path, "--listen", "127.0.0.1:0", "--socket", socket]
            + (arguments.contains("--state-dir") ? [] : ["--state-dir", stateFolder])
            // A test's client says hello as soon as its task runs again, which on a busy machine
            // (AddressSanitizer, both threads of the tests' pool held) can be past the host's
            // 10 s: the tests of the hello timeout set theirs.
            + (arguments.contains("--hello-timeout") ? [] : ["--hello-timeout", "120"]) + arguments
        if let descriptorLimit {
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments =
                ["-c", "ulimit -n \(descriptorLimit) && exec \"$0\" \"$@\"", executable.path] + hostArguments
        } else {
            process.executableURL = executable
            process.arguments = hostArguments
        }
        var inherited = ProcessInfo.processInfo.environment
        // Under Scripts/test-asan.sh the host and its workers check for leaks at exit, with
        // options of their own; the test runner itself does not.
        if let options = inherited["ATRIUM_HOST_ASAN_OPTIONS"] { inherited["ASAN_OPTIONS"] = options }
        // No configuration file of the machine's or the user's, and glibc's malloc as atriumd
        // sets it: a test says what it runs with.
        inherited["ATRIUM_CONFIG"] = "off"
        // What a plugin keeps in the user's data folder (the Files service's default folder)
        // goes in the test's state folder, not in the home of whoever runs the tests.
        inherited["XDG_DATA_HOME"] = stateFolder + "/data"
        inherited["MALLOC_ARENA_MAX"] = nil
        inherited["GLIBC_TUNABLES"] = nil
        process.environment = inherited.merging(environment) { $1 }
        let collector = OutputCollector()
        let pipe = try PrivatePipe()
        process.standardOutput = pipe.writing
        process.standardError = pipe.writing
        try process.run()
        pipe.childStarted()
        collector.read(pipe.reading)
        var port: Int?
        let ready = try await eventually(within: .seconds(seconds)) {
            let text = collector.text
            if text.contains("atriumd: ready") { port = Self.port(in: text) }
            if port != nil { return true }
            if !process.isRunning {
                // All it wrote before it ended, for the error.
                _ = await eventually(within: .seconds(5)) { collector.hasEnded }
                throw StartError(
                    description:
                        "atriumd exited with \(process.terminationStatus) before it was ready:\n\(collector.text)")
            }
            return false
        }
        guard ready, let port else {
            process.terminate()
            throw StartError(description: "atriumd was not ready within \(seconds) s:\n\(collector.text)")
        }
        return TestHost(
            process: process, port: port, socketPath: socket, manifestsFolder: manifestsFolder,
            stateFolder: URL(fileURLWithPath: stateFolder), output: collector)
    }

    private init(
        process: Process, port: Int, socketPath: String, manifestsFolder: URL, stateFolder: URL,
        output: OutputCollector
    ) {
        self.process = process
        self.port = port
        self.socketPath = socketPath
        self.manifestsFolder = manifestsFolder
        self.stateFolder = stateFolder
        self.output = output
    }

    static func port(in text: String) -> Int? {
        guard let range = text.range(of: "listening on tcp 127.0.0.1:") else { return nil }
        return Int(text[range.upperBound...].prefix { $0.isNumber })
    }

    /// Puts `json` into the manifests folder as `name` in one step (``install(_:at:)``).
    public func installManifest(_ name: String, _ json: String) throws {
        try Self.install(json, at: manifestsFolder.appendingPathComponent(name))
    }

    /// Puts `text` at `destination` in one step, as an installer should: written beside its
    /// folder, then renamed in. (Foundation's atomic write makes its temporary file inside the
    /// folder, and a host watching it would see that while it is written.)
    public static func install(_ text: String, at destination: URL) throws {
        let staged = destination.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(
            ".atrium-staged-\(UUID().uuidString)")
        try Data(text.utf8).write(to: staged)
        guard rename(staged.path, destination.path) == 0 else {
            let reason = String(cString: strerror(errno))
            try? FileManager.default.removeItem(at: staged)
            throw StartError(description: "cannot put \(destination.path) in place: \(reason)")
        }
    }

    /// The host's resident memory now, in bytes (VmRSS of /proc/PID/status), or nil when it
    /// cannot be read.
    public var residentBytes: Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return nil }
        let digits = line.split(separator: " ").dropFirst().first.flatMap { Int($0) }
        return digits.map { $0 * 1024 }
    }

    /// How many descriptors the host has open now (the entries of /proc/PID/fd).
    public var openDescriptors: Int? {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process.processIdentifier)/fd"))?.count
    }

    /// Whether the host process is still running.
    public var isRunning: Bool { process.isRunning }

    /// How many times the host's output contains `text`.
    public func count(_ text: String) -> Int {
        log.components(separatedBy: text).count - 1
    }

    /// Everything the host printed so far (standard output and the log on standard error).
    public var log: String { output.text }

    /// Whether the host's output so far contains `text`. For expectations: one on
    /// `log.contains(...)` would print the whole log when it fails.
    public func logged(_ text: String) -> Bool { log.contains(text) }

    /// The log's last `count` lines, for a failure's message.
    public func lastLines(_ count: Int = 30) -> String {
        log.split(separator: "\n", omittingEmptySubsequences: false).suffix(count).joined(separator: "\n")
    }

    /// Whether the host's output contains `text` within `timeout` (for things the host logs
    /// a moment after answering).
    public func waitForLog(_ text: String, timeout: Duration = .seconds(10)) async -> Bool {
        await eventually(within: timeout) { log.contains(text) }
    }

    /// Sends `signal` (SIGTERM by default) and waits up to `timeout` for the host to exit: by
    /// default 20 s, 60 s under AddressSanitizer (where the host and each of its workers check
    /// their memory for leaks as they exit, while the rest of the suite runs).
    ///
    /// - Returns: its exit status, or nil when it did not exit in time (it is then killed).
    @discardableResult
    public func stop(signal: Int32 = SIGTERM, timeout: Duration? = nil) async -> Int32? {
        let timeout = timeout ?? (TestEnvironment.addressSanitizer ? .seconds(60) : .seconds(20))
        if process.isRunning {
            kill(process.processIdentifier, signal)
            guard await eventually(within: timeout, { !process.isRunning }) else {
                kill(process.processIdentifier, SIGKILL)
                return nil
            }
        }
        // Everything it wrote is in the log once this returns (bounded: a worker it left
        // running would hold the pipe open).
        _ = await eventually(within: .seconds(10)) { output.hasEnded }
        return process.terminationStatus
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        try? FileManager.default.removeItem(at: manifestsFolder)
    }
}

/// What a host writes to its standard output and error, read to its end on a thread of its
/// own: a blocking read holds none of the threads the tests' tasks share.
final class OutputCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    private var ended = false

    /// Starts reading `handle` until its end (the handle is kept until then).
    func read(_ handle: FileHandle) {
        Thread.detachNewThread { [self] in
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = Glibc.read(handle.fileDescriptor, &buffer, buffer.count)
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { break }
                lock.withLock { data.append(contentsOf: buffer[..<count]) }
            }
            lock.withLock { ended = true }
        }
    }

    /// Whether the output has ended: the host, and everything it started that shared its
    /// output, has exited.
    var hasEnded: Bool { lock.withLock { ended } }

    /// What was read so far: whole lines only, until the output has ended (a line read in two
    /// parts is never seen half).
    var text: String {
        lock.withLock {
            let end = ended ? data.endIndex : (data.lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? data.startIndex)
            return String(decoding: data[..<end], as: UTF8.self)
        }
    }
}
