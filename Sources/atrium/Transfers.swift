import ArgumentParser
import AtriumClient
import AtriumProtocol
import AtriumValues
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// `atrium get`: asks a service for a file (its answer carries a `Transfer`) and downloads it.
struct Get: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Ask a service for a file and download it; run it again to resume.",
        discussion: """
            Sends the message (KEY=VALUE words, as atrium send takes them) and follows the \
            Transfer in the answer into FILE: the bytes wait in this client's state folder \
            ($XDG_STATE_HOME/atrium/client-transfers) and FILE is put in place once complete. \
            Progress shows on a terminal (bytes, rate, time left), and as a line a second \
            otherwise. If it stops (the network, Ctrl-C, the host restarting), the same command \
            resumes from the bytes already there. \
            atrium transfers lists what this client has started.

            Examples:
              atrium get --package atrium.examples.files --service atrium.files \\
                Command=get Name=photo.jpg -o photo.jpg
              atrium get 10.0.0.5:7340 --package P --service S Id=42 -o out.bin
            """)

    @OptionGroup var options: HostOptions

    @Option(help: "The package id of the app.")
    var package: String

    @Option(help: "The app service name.")
    var service: String

    @Option(name: [.short, .long], help: ArgumentHelp("Where to put the file.", valueName: "file"))
    var output: String

    @Argument(help: ArgumentHelp("The request as KEY=VALUE words.", valueName: "key=value"))
    var fields: [String] = []

    func validate() throws {
        _ = try MessageText.valueSet(arguments: TransferCommand.split(options, fields).fields)
    }

    func run() async throws {
        TransferMemory.keepFreedMemory()
        let (host, words) = TransferCommand.split(options, fields)
        let message = try MessageText.valueSet(arguments: words)
        let destination = URL(fileURLWithPath: output).standardizedFileURL
        let store = ClientTransferStore()
        let connection = try await options.connect(to: host, clientId: HostOptions.stableClientId)
        defer { Task { await connection.close() } }
        let record = try await TransferCommand.transfer(
            "download", of: destination.path, message, host: host, package: package, service: service, store: store,
            on: connection, options: options)
        let operation = DownloadOperation(
            transfer: record.transfer, destination: destination, connection: connection, partialFolder: store.folder)
        let final = try await TransferCommand.follow(
            operation.progress, record: record, store: store, name: destination.lastPathComponent
        ) { try await operation.run() }
        print("saved \(destination.path) (\(ProgressPrinter.bytes(final.bytes)))")
    }
}

/// `atrium put`: asks a service to accept a file (its answer carries a `Transfer`) and uploads it.
struct Put: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send a file to a service; run it again to resume.",
        discussion: """
            Sends the message (KEY=VALUE words; Name and Size are the file's unless given) and \
            follows the Transfer in the answer, sending FILE from what the host holds. The \
            host checks the file's size and SHA-256 before the service takes it, and the \
            service's result is printed. If it stops, the same command resumes from the bytes \
            the host holds on stable storage.

            Examples:
              atrium put holiday.mov --package atrium.examples.files --service atrium.files \\
                Command=put
            """)

    @Argument(help: ArgumentHelp("The file to send.", valueName: "file"))
    var file: String

    @OptionGroup var options: HostOptions

    @Option(help: "The package id of the app.")
    var package: String

    @Option(help: "The app service name.")
    var service: String

    @Argument(help: ArgumentHelp("The request as KEY=VALUE words.", valueName: "key=value"))
    var fields: [String] = []

    func validate() throws {
        _ = try MessageText.valueSet(arguments: TransferCommand.split(options, fields).fields)
    }

    func run() async throws {
        TransferMemory.keepFreedMemory()
        let (host, words) = TransferCommand.split(options, fields)
        let source = URL(fileURLWithPath: file).standardizedFileURL
        var status = stat()
        guard stat(source.path, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            printError("\(source.path) is not a file that can be read")
            throw ExitCode.validationFailure
        }
        var message = try MessageText.valueSet(arguments: words)
        if message["Name"] == nil { message["Name"] = .string(source.lastPathComponent) }
        if message["Size"] == nil { message["Size"] = .int(Int64(status.st_size)) }
        let store = ClientTransferStore()
        let connection = try await options.connect(to: host, clientId: HostOptions.stableClientId)
        defer { Task { await connection.close() } }
        let record = try await TransferCommand.transfer(
            "upload", of: source.path, message, host: host, package: package, service: service, store: store,
            on: connection, options: options)
        let operation = UploadOperation(transfer: record.transfer, source: source, connection: connection)
        let final = try await TransferCommand.follow(
            operation.progress, record: record, store: store, name: source.lastPathComponent
        ) { try await operation.run() }
        print("sent \(source.path) (\(ProgressPrinter.bytes(final.bytes)))")
        if let result = final.result { print(result) }
    }
}

/// `atrium transfers`: this client's transfers, as the host and this client know them.
struct Transfers: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List this client's transfers, follow them, resume or cancel one.",
        discussion: """
            Without a subcommand, lists the transfers this client has on HOST (the host's \
            states and results) beside those it started from this machine (atrium get, atrium \
            put), which it keeps in $XDG_STATE_HOME/atrium/client-transfers.

            Examples:
              atrium transfers
              atrium transfers --watch
              atrium transfers resume 3f2a
              atrium transfers cancel 3f2a
            """,
        subcommands: [TransfersList.self, TransfersResume.self, TransfersCancel.self],
        defaultSubcommand: TransfersList.self)
}

struct TransfersList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List this client's transfers.")

    @OptionGroup var options: HostOptions

    @Flag(help: "Follow the transfers: print each change as it comes, until interrupted.")
    var watch = false

    func run() async throws {
        let connection = try await options.connect(clientId: HostOptions.stableClientId)
        defer { Task { await connection.close() } }
        let local = Dictionary(ClientTransferStore().all().map { ($0.transfer, $0) }) { first, _ in first }
        var cursor: UInt64?
        var printed = false
        repeat {
            let list = try await reachable { try await connection.transfers(since: cursor, timeout: options.duration) }
            for state in list.transfers {
                print(TransferCommand.line(state, local: local[state.transfer]))
                printed = true
            }
            cursor = list.cursor
            if watch { try await Task.sleep(for: .seconds(1)) }
        } while watch
        if !printed { print("no transfers on \(options.target) for this client") }
    }
}

struct TransfersResume: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resume", abstract: "Resume a transfer this client started (atrium get or put).")

    @Argument(help: ArgumentHelp("The transfer's id, or its first characters.", valueName: "id"))
    var id: String

    @OptionGroup var options: HostOptions

    func run() async throws {
        TransferMemory.keepFreedMemory()
        let store = ClientTransferStore()
        let record = try TransferCommand.record(id, in: store)
        let host = options.host == HostOptions.defaultHost && !options.local ? record.host : options.target
        let connection = try await options.connect(to: host, clientId: HostOptions.stableClientId)
        defer { Task { await connection.close() } }
        let file = URL(fileURLWithPath: record.path)
        if record.direction == "download" {
            let operation = DownloadOperation(
                transfer: record.transfer, destination: file, connection: connection, partialFolder: store.folder)
            _ = try await TransferCommand.follow(
                operation.progress, record: record, store: store, name: file.lastPathComponent
            ) {
                try await operation.run()
            }
            print("saved \(file.path)")
        } else {
            let operation = UploadOperation(transfer: record.transfer, source: file, connection: connection)
            let final = try await TransferCommand.follow(
                operation.progress, record: record, store: store, name: file.lastPathComponent
            ) { try await operation.run() }
            print("sent \(file.path)")
            if let result = final.result { print(result) }
        }
    }
}

struct TransfersCancel: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "cancel", abstract: "Cancel a transfer at the host.")

    @Argument(help: ArgumentHelp("The transfer's id, or its first characters.", valueName: "id"))
    var id: String

    @OptionGroup var options: HostOptions

    func run() async throws {
        let store = ClientTransferStore()
        let (transfer, host, found) = try TransferCommand.named(id, in: store, options: options)
        let connection = try await options.connect(to: host, clientId: HostOptions.stableClientId)
        defer { Task { await connection.close() } }
        let state = try await reachable { try await connection.cancelTransfer(transfer, timeout: options.duration) }
        if var record = found {
            record.state = state.state
            record.error = state.error
            try? store.save(record)
            unlink(store.partialFile(of: transfer).path)
        }
        print("\(transfer): \(state.state)\(state.error.map { " (\($0))" } ?? "")")
        if state.error == "notFound" { throw Exit.notSuccess }
    }
}

/// What `get`, `put` and `transfers` share.
enum TransferCommand {
    /// The host, and the KEY=VALUE words: a first word with '=' is a field, not a host.
    static func split(_ options: HostOptions, _ fields: [String]) -> (host: String, fields: [String]) {
        options.host.contains("=")
            ? (options.local ? options.target : HostOptions.defaultHost, [options.host] + fields)
            : (options.target, fields)
    }

    /// The unfinished transfer this client started of the same file with the same service (the
    /// same command run again resumes it), or a new one the service makes for `message`.
    static func transfer(
        _ direction: String, of path: String, _ message: ValueSet, host: String, package: String, service: String,
        store: ClientTransferStore, on connection: AtriumConnection, options: HostOptions
    ) async throws -> ClientTransferRecord {
        if let resumed = store.unfinished(
            direction: direction, host: host, package: package, service: service, path: path)
        {
            print("resuming transfer \(resumed.transfer) \(direction == "download" ? "into" : "of") \(path)")
            return resumed
        }
        let (transfer, size) = try await request(
            message, package: package, service: service, on: connection, options: options,
            startingDownload: direction == "download")
        var localSize: Int64 = -1
        if direction == "upload" {
            localSize = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.int64Value ?? -1
        }
        let record = ClientTransferRecord(
            transfer: transfer, direction: direction, host: host, package: package, service: service, path: path,
            size: direction == "upload" ? localSize : size ?? -1)
        try? store.save(record)
        return record
    }

    /// Opens the service, sends `message`, and reads the `Transfer` (and `Size`) of its answer;
    /// with `startingDownload`, the download offered starts with the answer.
    static func request(
        _ message: ValueSet, package: String, service: String, on connection: AtriumConnection, options: HostOptions,
        startingDownload: Bool = false
    ) async throws -> (UUID, Int64?) {
        let app = AppServiceConnection(appServiceName: service, packageId: package, connection: connection)
        let opened = try await reachable { try await app.openRemote(timeout: options.duration) }
        guard opened == .success else {
            print("open \(package)/\(service): \(opened)\(openHint(opened, app.openError, options.target))")
            throw Exit.notSuccess
        }
        let answer = try await reachable {
            try await app.sendMessage(message, startingDownload: startingDownload, timeout: options.duration)
        }
        guard answer.status == .success else {
            print("status: \(answer.status)")
            if let error = answer.error { print("error: \(error)") }
            throw Exit.notSuccess
        }
        guard case .uuid(let transfer)? = answer.message["Transfer"] else {
            printError("the service answered without a Transfer: \(answer.message)")
            throw Exit.notSuccess
        }
        if case .int(let size)? = answer.message["Size"] { return (transfer, size) }
        return (transfer, nil)
    }

    /// Runs a transfer while its progress is shown, keeping its record up to date; a failure
    /// is printed with what to do.
    static func follow(
        _ progress: AsyncStream<TransferProgress>, record: ClientTransferRecord, store: ClientTransferStore,
        name: String, _ run: @Sendable () async throws -> TransferProgress
    ) async throws -> TransferProgress {
        let shown = Task {
            var printer = ProgressPrinter(name: name)
            for await step in progress { printer.show(step) }
            printer.finish()
        }
        var record = record
        do {
            let final = try await run()
            shown.cancel()
            _ = await shown.value
            record.state = final.state
            record.size = final.size
            record.error = final.error
            record.result = final.result.map { MessageText.json($0, pretty: false) }
            try? store.save(record)
            return final
        } catch let error as AtriumClientError {
            shown.cancel()
            _ = await shown.value
            if error.code == .transferFailed {
                record.state =
                    error.message.contains("waits") || error.message.contains("run it again") ? "waiting" : "failed"
                record.error = error.message
                try? store.save(record)
            }
            printError(error.message)
            throw exitStatus(for: error)
        }
    }

    /// The transfer `id` names: one this client started (by its id's first characters), with
    /// its host unless HOST is given, or any transfer by its whole uuid, on HOST.
    static func named(_ id: String, in store: ClientTransferStore, options: HostOptions) throws
        -> (transfer: UUID, host: String, record: ClientTransferRecord?)
    {
        let found = store.find(id)
        if found.count == 1 {
            let host =
                options.host == HostOptions.defaultHost && !options.local ? found[0].host : options.target
            return (found[0].transfer, host, found[0])
        }
        if let uuid = UUID(uuidString: id) { return (uuid, options.target, nil) }
        return (try record(id, in: store).transfer, options.target, nil)
    }

    static func record(_ id: String, in store: ClientTransferStore) throws -> ClientTransferRecord {
        let found = store.find(id)
        guard found.count == 1 else {
            printError(
                found.isEmpty
                    ? "no transfer \(id) started from this machine (atrium transfers lists them)"
                    : "\(id) names \(found.count) transfers: give more of its id")
            throw Exit.notSuccess
        }
        return found[0]
    }

    /// One line of `atrium transfers`.
    static func line(_ state: TransferStateFrame, local: ClientTransferRecord?) -> String {
        var line = "\(state.transfer.uuidString.lowercased())  \(state.state)"
        if let error = state.error { line += " (\(error))" }
        line += "  \(ProgressPrinter.bytes(Int64(state.offset)))"
        if state.size >= 0 { line += " of \(ProgressPrinter.bytes(state.size))" }
        if let local { line += "  \(local.direction) \(local.path)" }
        if let result = try? state.result?.decode() { line += "  result: \(MessageText.json(result, pretty: false))" }
        return line
    }
}

/// A transfer's progress for a person: one line rewritten in place on a terminal (bytes, rate,
/// time left), a plain line at most each second otherwise.
struct ProgressPrinter {
    let name: String
    let isTerminal = isatty(STDOUT_FILENO) == 1
    private let start = ContinuousClock.now
    private var startBytes: Int64?
    private var lastShown: ContinuousClock.Instant?
    private var shownOnce = false

    init(name: String) { self.name = name }

    mutating func show(_ progress: TransferProgress) {
        let now = ContinuousClock.now
        if startBytes == nil { startBytes = progress.bytes }
        let ended = progress.hasEnded || progress.state == "verifying" || progress.state == "delivering"
        if let lastShown, now - lastShown < (isTerminal ? .milliseconds(100) : .seconds(1)), !ended { return }
        lastShown = now
        let seconds = Double((now - start).components.seconds) + Double((now - start).components.attoseconds) / 1e18
        let moved = progress.bytes - (startBytes ?? 0)
        let rate = seconds > 0.2 ? Double(moved) / seconds : 0
        var text = "\(name): \(Self.bytes(progress.bytes))"
        if progress.size >= 0 {
            text += " of \(Self.bytes(progress.size))"
            if progress.size > 0 {
                text += String(format: " (%.0f%%)", 100 * Double(progress.bytes) / Double(progress.size))
            }
        }
        if rate > 0 {
            text += "  \(Self.bytes(Int64(rate)))/s"
            if progress.size > progress.bytes {
                text += "  \(Self.duration(Double(progress.size - progress.bytes) / rate)) left"
            }
        }
        if progress.state != "running" { text += "  \(progress.state)" }
        if isTerminal {
            FileHandle.standardOutput.write(Data(("\r\u{1B}[K" + text).utf8))
        } else {
            print(text)
            fflush(nil)
        }
        shownOnce = true
    }

    func finish() {
        if isTerminal, shownOnce { FileHandle.standardOutput.write(Data("\n".utf8)) }
    }

    static func bytes(_ count: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(count) B" : String(format: "%.1f %@", value, units[unit])
    }

    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite else { return "?" }
        let total = Int(seconds.rounded(.up))
        return total >= 3600
            ? String(format: "%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60)
            : String(format: "%d:%02d", total / 60, total % 60)
    }
}
