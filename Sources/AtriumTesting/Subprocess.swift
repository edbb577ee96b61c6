import CAtriumSystem
public import Foundation

/// What a finished program printed and how it ended.
public struct ProgramOutput: Sendable {
    public var status: Int32
    /// Standard output and standard error, interleaved as written.
    public var output: String

    public init(status: Int32, output: String) {
        self.status = status
        self.output = output
    }
}

/// A pipe no other program inherits, for a child's output. Foundation's `Pipe` stays open
/// across exec, and `Process` closes in its child only the descriptors that were open when it
/// looked: a program another test starts at the same moment can inherit this pipe's write
/// end, and the reader would see the end of the output only when that program exits. Give
/// `writing` to the child as its output (its copy there is inheritable), then call
/// ``childStarted()``.
public struct PrivatePipe {
    public let reading: FileHandle
    public let writing: FileHandle

    public init() throws {
        guard let ends = Self.ends() else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EMFILE) }
        reading = FileHandle(fileDescriptor: ends.reading, closeOnDealloc: true)
        writing = FileHandle(fileDescriptor: ends.writing, closeOnDealloc: true)
    }

    /// The two descriptors of such a pipe, for a caller that keeps them itself; nil when none
    /// can be made (errno says why).
    public static func ends() -> (reading: Int32, writing: Int32)? {
        var ends: [Int32] = [-1, -1]
        guard atrium_make_pipe(&ends) == 0 else { return nil }
        return (ends[0], ends[1])
    }

    /// Closes this process's write end: the output ends once the child, and whatever it
    /// started, has ended.
    public func childStarted() {
        try? writing.close()
    }
}

/// Runs `executable` (a path, or a name looked up on PATH) with `arguments` to the end. An
/// atriumd it runs reads no configuration file unless `environment` names one
/// (`ATRIUM_CONFIG`).
///
/// It waits on a thread of its own: a test that waits for a program never holds one of the
/// few threads every test's tasks run on (two on a two-core machine), which would stall
/// every other test meanwhile.
public func runProgram(
    _ executable: String, _ arguments: [String], in folder: URL? = nil, environment: [String: String] = [:]
) async throws -> ProgramOutput {
    try await withCheckedThrowingContinuation { continuation in
        Thread {
            continuation.resume(
                with: Result {
                    try runProgramWaiting(executable, arguments, in: folder, environment: environment)
                })
        }.start()
    }
}

/// ``runProgram(_:_:in:environment:)`` waiting on the calling thread: for what cannot wait
/// asynchronously (a `defer`, an initialiser, a static property), and only for short programs.
public func runProgramWaiting(
    _ executable: String, _ arguments: [String], in folder: URL? = nil, environment: [String: String] = [:]
) throws -> ProgramOutput {
    let process = Process()
    process.environment = ProcessInfo.processInfo.environment.merging(
        ["ATRIUM_CONFIG": "off"].merging(environment) { $1 }
    ) { $1 }
    if executable.contains("/") {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
    } else {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [executable] + arguments
    }
    if let folder { process.currentDirectoryURL = folder }
    let pipe = try PrivatePipe()
    process.standardOutput = pipe.writing
    process.standardError = pipe.writing
    try process.run()
    pipe.childStarted()
    let data = pipe.reading.readDataToEndOfFile()
    process.waitUntilExit()
    return ProgramOutput(status: process.terminationStatus, output: String(decoding: data, as: UTF8.self))
}
