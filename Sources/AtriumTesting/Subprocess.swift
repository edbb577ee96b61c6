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
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return ProgramOutput(status: process.terminationStatus, output: String(decoding: data, as: UTF8.self))
}
