import AtriumProtocol
import AtriumValues
import Crypto
public import Foundation
import NIOCore
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// An upload a service accepted (the `Transfer` of its answer), from a local file: what
/// Windows' `UploadOperation` is to an app. ``run()`` sends the file from the bytes the host
/// holds until the service has taken it, and returns the service's result; ``pause()`` stops
/// it, and running it again (on a later connection, from a new process) goes on from what the
/// host holds on stable storage. The file's SHA-256 goes with its last chunk: the host checks
/// it before handing the file to the service.
public final class UploadOperation: Sendable {
    public let source: URL
    private let control: TransferControl
    public var transfer: UUID { control.transfer }
    public var connection: AtriumConnection { control.connection }
    /// Every change: bytes on the host's stable storage, state, and the end with the result.
    public var progress: AsyncStream<TransferProgress> { control.progress }

    public init(transfer: UUID, source: URL, connection: AtriumConnection) {
        self.source = source
        control = TransferControl(transfer: transfer, connection: connection)
    }

    /// Sends the file until the service has taken it (its result is returned), the upload is
    /// paused (a `waiting` result), or it fails (``AtriumClientError`` `transferFailed`).
    @discardableResult
    public func run() async throws -> TransferProgress {
        control.begin()
        let descriptor = open(source.path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw AtriumClientError(.localFile, "cannot read \(source.path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        var status = stat()
        fstat(descriptor, &status)
        let size = Int64(status.st_size)
        let (attached, events) = try await connection.attachTransfer(transfer)
        guard attached.status == .success else {
            throw AtriumClientError(
                .transferFailed,
                "the host refused to attach transfer \(transfer): \(attached.error ?? "\(attached.status)")")
        }
        guard attached.direction == "upload" else {
            try? await connection.sendTransfer(.detach(transfer: transfer))
            throw AtriumClientError(.transferFailed, "transfer \(transfer) is a download, not an upload")
        }
        guard attached.size < 0 || attached.size == size else {
            try? await connection.sendTransfer(.detach(transfer: transfer))
            throw AtriumClientError(
                .transferFailed,
                "the service accepted \(attached.size) bytes, and \(source.path) has \(size): it changed since")
        }
        var held = Int64(attached.offset)
        guard held <= size else {
            try? await connection.sendTransfer(.detach(transfer: transfer))
            throw AtriumClientError(
                .transferFailed, "the host holds \(held) bytes, and \(source.path) has \(size): it changed since")
        }
        // The file's SHA-256 goes with its last chunk: the bytes the host holds already are
        // read for it now, and the rest as they are sent, so the first byte goes at once.
        var hasher = try await Self.hasher(of: descriptor, upTo: held, path: source.path)
        var edge = held + Int64(attached.window)
        var sent = held
        let chunkBytes = Int64(max(attached.chunkBytes, 1))
        var last = TransferProgress(transfer: transfer, bytes: held, size: attached.size, state: "running")
        control.tell(last)
        var buffer = ByteBufferAllocator().buffer(capacity: Int(chunkBytes))
        var iterator = events.makeAsyncIterator()
        var finished = false
        while true {
            // Within the window the host granted, never past it.
            while !finished, !control.isPaused, sent < edge || (sent == size && size == held) {
                let count = min(chunkBytes, size - sent, edge - sent)
                buffer.clear()
                let read = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: Int(max(count, 1))) { memory in
                    count == 0 ? 0 : pread(descriptor, memory.baseAddress, Int(count), off_t(sent))
                }
                guard read == Int(count) else {
                    try? await connection.sendTransfer(.detach(transfer: transfer))
                    throw AtriumClientError(.localFile, "cannot read \(source.path) at \(sent): it changed, or shrank")
                }
                buffer.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
                let isLast = sent + count == size
                try await connection.sendTransfer(
                    .chunk(
                        ChunkFrame(
                            transfer: transfer, offset: UInt64(sent), data: buffer, last: isLast,
                            digest: isLast ? Array(hasher.finalize()) : nil)))
                sent += count
                if isLast { finished = true }
            }
            guard !control.isPaused, let event = await iterator.next() else { break }
            switch event {
            case .ack(let ack):
                held = Int64(ack.offset)
                edge = max(edge, held + Int64(ack.window))
                last.bytes = held
                control.tell(last)
            case .state(let state):
                if try control.take(state, into: &last) { return control.finish(last) }
            case .chunk:
                continue
            }
        }
        return try control.interrupted(last)
    }

    /// Stops sending: the host keeps what it holds, and ``run()`` resumes from there.
    public func pause() async { await control.pause() }

    /// For tests: pauses at the first step of a run that reaches `bytes` (see
    /// `TransferControl.pauseOnce(atBytes:)`).
    func pauseOnce(atBytes bytes: Int64) { control.pauseOnce(atBytes: bytes) }

    /// Cancels the upload at the host.
    @discardableResult
    public func cancel() async throws -> TransferProgress { try await control.cancel() }

    /// A SHA-256 of the file's first `size` bytes, read off the cooperative threads.
    static func hasher(of descriptor: Int32, upTo size: Int64, path: String) async throws -> SHA256 {
        if size == 0 { return SHA256() }
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<SHA256, any Error>) in
            DispatchQueue.global().async {
                var hasher = SHA256()
                var buffer = [UInt8](repeating: 0, count: 1 << 20)
                var offset: Int64 = 0
                while offset < size {
                    let want = Int(min(Int64(buffer.count), size - offset))
                    let got = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, want, off_t(offset)) }
                    if got < 0, errno == EINTR { continue }
                    guard got > 0 else {
                        continuation.resume(
                            throwing: AtriumClientError(.localFile, "cannot read \(path): it changed, or shrank"))
                        return
                    }
                    buffer.withUnsafeBytes {
                        hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0.prefix(got)))
                    }
                    offset += Int64(got)
                }
                continuation.resume(returning: hasher)
            }
        }
    }
}
