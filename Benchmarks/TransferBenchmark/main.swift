// atrium-transfer-bench: the moving parts of Benchmarks/transfers.py, which runs them and
// prints the ratios (BENCHMARKS.md, "Transfers").
//
//   serve-bare FILE [--tls]          a bare SwiftNIO (swift-nio-ssl) server that sends FILE
//                                    whole to each connection: the ceiling of this stack;
//                                    prints "port N"
//   fetch-bare PORT OUT [--tls]      receives it into OUT; prints "bytes B seconds S"
//   get PORT NAME OUT [--tls] [HELD] a download through atriumd's Files (DownloadOperation),
//                                    its partial bytes beside OUT; HELD, a file of the first
//                                    bytes, is taken as what the client already holds
//   put PORT FILE [--tls]            an upload through Files (UploadOperation)
//   many PORT PREFIX COUNT OUT [--tls] [--started]
//                                    downloads PREFIX0 … PREFIX(COUNT-1) one after another on
//                                    one connection into the folder OUT; with --started, each
//                                    download starts with its request (no attach round trip)
//   link PORT NAME [SIZE] --tls      a download of NAME (an upload of SIZE bytes as NAME) and
//                                    its HTTPS link; prints "url U bearer B pin P" (curl's pin)
//
// TLS is TLS 1.3 with a throwaway identity on both sides, as atrium's own.
import AtriumClient
import AtriumTLS
import AtriumValues
import Foundation
import NIOCore
import NIOPosix
import NIOSSL

#if canImport(Glibc)
    import Glibc
#endif

// As atrium get and put do: freed chunks kept for the next (for the bare pair as for atrium's).
TransferMemory.keepFreedMemory()

let arguments = Array(CommandLine.arguments.dropFirst())
let tls = arguments.contains("--tls")
let started = arguments.contains("--started")
let words = arguments.filter { $0 != "--tls" && $0 != "--started" }

func fail(_ text: String) -> Never {
    FileHandle.standardError.write(Data("atrium-transfer-bench: \(text)\n".utf8))
    exit(64)
}

func identity() throws -> TLSIdentity {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-bench-id-\(UUID())")
    return try TLSIdentity.loadOrCreate(in: folder, name: "bench", commonName: "bench")
}

func seconds(since start: ContinuousClock.Instant) -> Double {
    let elapsed = ContinuousClock.now - start
    return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
}

/// Sends a file whole to each connection, 256 KiB at a time, the next read once the last write
/// went out.
final class FileSender: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let descriptor: Int32
    let size: Int64
    var offset: Int64 = 0

    init(path: String) {
        descriptor = open(path, O_RDONLY | O_CLOEXEC)
        var status = stat()
        fstat(descriptor, &status)
        size = Int64(status.st_size)
    }

    func channelActive(context: ChannelHandlerContext) { send(context) }

    func send(_ context: ChannelHandlerContext) {
        guard offset < size else {
            context.close(promise: nil)
            return
        }
        let count = Int(min(256 << 10, size - offset))
        var buffer = context.channel.allocator.buffer(capacity: count)
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) {
            pread(descriptor, $0.baseAddress, count, off_t(offset))
        }
        offset += Int64(buffer.readableBytes)
        let loop = context.eventLoop
        context.writeAndFlush(NIOAny(buffer)).assumeIsolated().whenComplete { [self] _ in
            loop.assumeIsolated().execute { self.send(context) }
        }
    }
}

/// Writes what arrives into a file.
final class FileReceiver: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    let descriptor: Int32
    var bytes: Int64 = 0
    let done: EventLoopPromise<Int64>

    init(path: String, done: EventLoopPromise<Int64>) {
        descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        self.done = done
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        buffer.withUnsafeReadableBytes { raw in _ = pwrite(descriptor, raw.baseAddress, raw.count, off_t(bytes)) }
        bytes += Int64(buffer.readableBytes)
    }

    func channelInactive(context: ChannelHandlerContext) {
        close(descriptor)
        done.succeed(bytes)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // The sender's close without close_notify ends the stream as well.
        context.close(promise: nil)
    }
}

func connect(_ port: Int) async throws -> AtriumConnection {
    let endpoint = AtriumEndpoint(.tcp(host: "127.0.0.1", port: port))
    return try await AtriumConnection.connect(
        to: endpoint, clientId: "transfer-bench", tls: tls ? ClientTLS(identity: try identity()) : nil,
        timeout: .seconds(600))
}

func openFiles(on connection: AtriumConnection) async throws -> AppServiceConnection {
    let files = AppServiceConnection(
        appServiceName: "atrium.files", packageId: "atrium.examples.files", connection: connection)
    if try await files.openRemote() != .success { fail("Files did not open") }
    return files
}

func opened(_ files: AppServiceConnection?, _ connection: AtriumConnection) async throws -> AppServiceConnection {
    if let files { return files }
    return try await openFiles(on: connection)
}

func transfer(
    _ message: ValueSet, on connection: AtriumConnection, files: AppServiceConnection? = nil,
    startingDownload: Bool = false
) async throws -> UUID {
    let files = try await opened(files, connection)
    let answer = try await files.sendMessage(message, startingDownload: startingDownload)
    guard case .uuid(let id)? = answer.message["Transfer"] else { fail("Files answered \(answer.status)") }
    return id
}

/// Downloads PREFIX0 … PREFIX(COUNT-1) one after another: off the main actor, where an app's
/// background work runs (top-level code is the main actor's, and each await would hop to it).
nonisolated func many(port: Int, prefix: String, count: Int, into folder: String, started: Bool) async throws {
    let connection = try await connect(port)
    let files = try await openFiles(on: connection)
    let partials = URL(fileURLWithPath: folder, isDirectory: true)
    let start = ContinuousClock.now
    var total: Int64 = 0
    var asking = Duration.zero
    for index in 0..<count {
        let asked = ContinuousClock.now
        let id = try await transfer(
            ["Command": "get", "Name": .string("\(prefix)\(index)")], on: connection, files: files,
            startingDownload: started)
        asking += ContinuousClock.now - asked
        total +=
            try await DownloadOperation(
                transfer: id, destination: partials.appendingPathComponent("\(index)", isDirectory: false),
                connection: connection, partialFolder: partials
            ).run().bytes
    }
    print("bytes \(total) seconds \(seconds(since: start)) asking \(asking)")
    await connection.close()
}

switch words.first {
case "serve-bare":
    guard words.count == 2 else { fail("serve-bare FILE [--tls]") }
    let path = words[1]
    let context = tls ? try identity().makeServerContext() : nil
    let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        .childChannelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                if let context {
                    try channel.pipeline.syncOperations.addHandler(
                        NIOSSLServerHandler(
                            context: context, customVerificationCallback: { $1.succeed(.certificateVerified) }))
                }
                try channel.pipeline.syncOperations.addHandler(FileSender(path: path))
            }
        }
        .bind(host: "127.0.0.1", port: 0).get()
    print("port \(server.localAddress!.port!)")
    fflush(nil)
    try await server.closeFuture.get()
case "fetch-bare":
    guard words.count == 3, let port = Int(words[1]) else { fail("fetch-bare PORT OUT [--tls]") }
    let context = tls ? try identity().makeClientContext() : nil
    let group = MultiThreadedEventLoopGroup.singleton
    let done = group.next().makePromise(of: Int64.self)
    let start = ContinuousClock.now
    _ = try await ClientBootstrap(group: group)
        .channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                if let context {
                    try channel.pipeline.syncOperations.addHandler(
                        try NIOSSLClientHandler(
                            context: context, serverHostname: nil,
                            customVerificationCallback: { $1.succeed(.certificateVerified) }))
                }
                try channel.pipeline.syncOperations.addHandler(FileReceiver(path: words[2], done: done))
            }
        }
        .connect(host: "127.0.0.1", port: port).get()
    let bytes = try await done.futureResult.get()
    print("bytes \(bytes) seconds \(seconds(since: start))")
case "get":
    guard words.count == 4 || words.count == 5, let port = Int(words[1]) else {
        fail("get PORT NAME OUT [--tls] [HELD]")
    }
    let destination = URL(fileURLWithPath: words[3])
    let connection = try await connect(port)
    let start = ContinuousClock.now
    let id = try await transfer(["Command": "get", "Name": .string(words[2])], on: connection)
    let operation = DownloadOperation(
        transfer: id, destination: destination, connection: connection,
        partialFolder: destination.deletingLastPathComponent())
    if words.count == 5 {
        guard rename(words[4], operation.partialFile.path) == 0 else { fail("cannot take \(words[4])") }
    }
    let done = try await operation.run()
    print("bytes \(done.bytes) seconds \(seconds(since: start))")
    await connection.close()
case "put":
    guard words.count == 3, let port = Int(words[1]) else { fail("put PORT FILE [--tls]") }
    let url = URL(fileURLWithPath: words[2])
    let size = (try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int) ?? 0
    let connection = try await connect(port)
    let start = ContinuousClock.now
    let id = try await transfer(
        ["Command": "put", "Name": .string("up-\(UUID().uuidString.prefix(8))"), "Size": .int(Int64(size))],
        on: connection)
    let done = try await UploadOperation(transfer: id, source: url, connection: connection).run()
    print("bytes \(done.bytes) seconds \(seconds(since: start)) state \(done.state)")
    await connection.close()
case "many":
    guard words.count == 5, let port = Int(words[1]), let count = Int(words[3]) else {
        fail("many PORT PREFIX COUNT OUT [--tls]")
    }
    try await many(port: port, prefix: words[2], count: count, into: words[4], started: started)
case "link":
    guard words.count == 3 || words.count == 4, let port = Int(words[1]), tls else {
        fail("link PORT NAME [SIZE] --tls")
    }
    let connection = try await connect(port)
    let message: ValueSet =
        words.count == 4
        ? ["Command": "put", "Name": .string(words[2]), "Size": .int(Int64(words[3]) ?? 0)]
        : ["Command": "get", "Name": .string(words[2])]
    let id = try await transfer(message, on: connection)
    let link = try await connection.transferLink(id)
    guard link.status == .success, let identity = connection.hostIdentity else { fail("no link: \(link)") }
    // curl's pin: the host's identity (the SHA-256 of its key's SubjectPublicKeyInfo) in base64.
    let hex = Array(identity.utf8)
    let digest = stride(from: 0, to: hex.count, by: 2).map {
        UInt8(String(decoding: hex[$0..<$0 + 2], as: UTF8.self), radix: 16)!
    }
    print("url \(link.url) bearer \(link.bearer) pin \(Data(digest).base64EncodedString())")
    await connection.close()
default:
    fail("serve-bare, fetch-bare, get, put, many or link (see the top of Benchmarks/TransferBenchmark/main.swift)")
}
