import AtriumProtocol
import AtriumValues
public import Foundation
import NIOCore
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A download a service offered (the `Transfer` of its answer), into a local file: what
/// Windows' `DownloadOperation` is to an app. ``run(window:)`` moves the bytes until the
/// download completes; ``pause()`` stops it (the host keeps it), and running it again, on this
/// connection or a later one, even from a new process, goes on from the bytes already in the
/// partial file: `ID.part` in the client's own state folder (where ``ClientTransferStore``
/// keeps its records), moved to the destination once complete.
public final class DownloadOperation: Sendable {
    public let destination: URL
    private let control: TransferControl
    public var transfer: UUID { control.transfer }
    public var connection: AtriumConnection { control.connection }
    /// Every change: bytes, state, and the end.
    public var progress: AsyncStream<TransferProgress> { control.progress }

    /// The partial file the bytes go to until the download is complete: `ID.part` in the
    /// partial folder. An operation made later for the same transfer, in this process or
    /// another, finds it there and goes on from its bytes.
    public let partialFile: URL

    /// The download of `transfer` into `destination`. Its bytes wait in `partialFolder` (by
    /// default the client's state folder, `$XDG_STATE_HOME/atrium/client-transfers`, private
    /// to the user) until the download completes.
    public init(transfer: UUID, destination: URL, connection: AtriumConnection, partialFolder: URL? = nil) {
        self.destination = destination
        partialFile = (partialFolder ?? ClientTransferStore().folder).appendingPathComponent(
            ClientTransferStore.partialName(of: transfer), isDirectory: false)
        control = TransferControl(transfer: transfer, connection: connection)
    }

    /// The bytes past what the client holds that the host may send before the next `ack`.
    public static let defaultWindow: UInt64 = 4 << 20

    /// Downloads from the bytes the partial file holds until the download completes (then the
    /// file is in place, and the result is returned), is paused (a `waiting` result), or
    /// fails (``AtriumClientError`` `transferFailed`, with the host's error code).
    @discardableResult
    public func run(window: UInt64 = defaultWindow) async throws -> TransferProgress {
        control.begin()
        var descriptor = open(partialFile.path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o644)
        if descriptor < 0, errno == ENOENT {
            // The partial folder is made on the first download into it.
            do {
                try FileManager.default.createDirectory(
                    at: partialFile.deletingLastPathComponent(), withIntermediateDirectories: true,
                    attributes: [.posixPermissions: 0o700])
            } catch {
                throw AtriumClientError(
                    .localFile, "cannot make \(partialFile.deletingLastPathComponent().path): \(error)")
            }
            descriptor = open(partialFile.path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o644)
        }
        guard descriptor >= 0 else {
            throw AtriumClientError(.localFile, "cannot write \(partialFile.path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        var status = stat()
        fstat(descriptor, &status)
        var held = Int64(status.st_size)
        let (attached, events) = try await connection.attachTransfer(
            transfer, offset: UInt64(held), window: window)
        guard attached.status == .success else {
            let error = attached.error ?? "\(attached.status)"
            if error == "ended", attached.direction == "download" {
                // Every byte here already (a run stopped after its last ack): it is whole.
                if attached.size >= 0, held == attached.size {
                    return try complete(TransferProgress(transfer: transfer, bytes: held, size: held, state: "running"))
                }
                // Failed, canceled or expired at the host: its bytes will never be whole.
                unlink(partialFile.path)
                throw AtriumClientError(
                    .transferFailed,
                    "transfer \(transfer) has ended at the host without completing (its outcome is in transfers)")
            }
            throw AtriumClientError(.transferFailed, "the host refused to attach transfer \(transfer): \(error)")
        }
        guard attached.direction == "download" else {
            try? await connection.sendTransfer(.detach(transfer: transfer))
            throw AtriumClientError(.transferFailed, "transfer \(transfer) is an upload, not a download")
        }
        let size = attached.size
        var last = TransferProgress(transfer: transfer, bytes: held, size: size, state: "running")
        var acknowledged = held
        control.tell(last)
        if held == size {
            // Everything is here already: acknowledging it completes the download.
            try await connection.send(
                .transfer(.ack(AckFrame(transfer: transfer, offset: UInt64(held), window: window))))
            return try complete(last)
        }
        for await event in events {
            // Paused: what is written stays, and the host keeps the rest.
            if control.isPaused { break }
            switch event {
            case .chunk(let chunk):
                guard chunk.offset == UInt64(held) else { continue }
                let written = chunk.data.withUnsafeReadableBytes { bytes in
                    Self.writeAll(descriptor, bytes, at: held)
                }
                guard written else {
                    try? await connection.sendTransfer(.detach(transfer: transfer))
                    throw AtriumClientError(
                        .localFile, "cannot write \(partialFile.path): \(String(cString: strerror(errno)))")
                }
                held += Int64(chunk.data.readableBytes)
                last.bytes = held
                control.tell(last)
                // An ack each quarter window (and at the end) keeps the host sending, at a
                // quarter of the frames an ack per chunk would take.
                if held - acknowledged >= Int64(window / 4) || held == size {
                    acknowledged = held
                    let ack = ClientFrame.transfer(
                        .ack(AckFrame(transfer: transfer, offset: UInt64(held), window: window)))
                    // The last is written before the download is called complete (a failed write
                    // leaves it to the next run); the others go on without waiting.
                    if held == size { try await connection.send(ack) } else { try connection.sendNow(ack) }
                }
                // Every byte is here and acknowledged: the download is complete (CONTRACT
                // section 8), without waiting a round trip for the host to say so.
                if held == size { return try complete(last) }
            case .state(let state):
                let completed: Bool
                do {
                    completed = try control.take(state, into: &last)
                } catch {
                    // Failed, canceled or expired at the host: its bytes will never be whole.
                    if last.hasEnded { unlink(partialFile.path) }
                    throw error
                }
                guard completed else { continue }
                guard held == size else {
                    // Completed elsewhere (over HTTPS, say) before these bytes came: they can
                    // never be whole here.
                    unlink(partialFile.path)
                    throw AtriumClientError(
                        .transferFailed,
                        "transfer \(transfer) was completed elsewhere (over HTTPS?) with \(held) of \(size) bytes here; those were removed"
                    )
                }
                return try complete(last)
            case .ack:
                continue
            }
        }
        return try control.interrupted(last)
    }

    /// Puts the file in place, as any downloaded file is (curl's, a browser's): not synced,
    /// which would cost a small file more than its bytes.
    private func complete(_ last: TransferProgress) throws -> TransferProgress {
        connection.stopEvents(of: transfer)
        try Self.move(partialFile, to: destination)
        var done = last
        done.state = "completed"
        done.error = nil
        return control.finish(done)
    }

    /// Stops moving bytes: the host keeps the download, and ``run(window:)`` resumes it.
    public func pause() async { await control.pause() }

    /// For tests: pauses at the first step of a run that reaches `bytes` (see
    /// `TransferControl.pauseOnce(atBytes:)`).
    func pauseOnce(atBytes bytes: Int64) { control.pauseOnce(atBytes: bytes) }

    /// Cancels the download at the host, and removes the partial file.
    @discardableResult
    public func cancel() async throws -> TransferProgress {
        let progress = try await control.cancel()
        unlink(partialFile.path)
        return progress
    }

    /// Moves `partial` to `destination`: a rename on the same file system; across file
    /// systems a copy beside the destination, renamed over it once whole (a reader never sees
    /// half a file), then the partial file removed.
    static func move(_ partial: URL, to destination: URL) throws {
        if rename(partial.path, destination.path) == 0 { return }
        let reason = errno
        guard reason == EXDEV else {
            throw AtriumClientError(
                .localFile,
                "cannot put the download in place at \(destination.path): \(String(cString: strerror(reason)))")
        }
        let copy = destination.deletingLastPathComponent().appendingPathComponent(
            ".\(destination.lastPathComponent).atrium-\(UUID().uuidString.prefix(8))")
        do {
            try FileManager.default.copyItem(at: partial, to: copy)
        } catch {
            unlink(copy.path)
            throw AtriumClientError(.localFile, "cannot copy the download to \(destination.path): \(error)")
        }
        guard rename(copy.path, destination.path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(copy.path)
            throw AtriumClientError(.localFile, "cannot put the download in place at \(destination.path): \(reason)")
        }
        unlink(partial.path)
    }

    static func writeAll(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) -> Bool {
        var done = 0
        while done < bytes.count {
            let count = pwrite(descriptor, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return false }
            done += count
        }
        return true
    }
}
