import AtriumProtocol
public import AtriumValues
public import Foundation
import Synchronization

/// Where a transfer stands, as its operation reports it: an `AsyncSequence` of these is the
/// transfer's progress (``DownloadOperation/progress``, ``UploadOperation/progress``), as
/// Windows' `DownloadOperation.Progress` is.
public struct TransferProgress: Sendable, Equatable {
    public var transfer: UUID
    /// Bytes the receiver holds: a download's bytes on this machine, an upload's bytes the
    /// host holds on stable storage.
    public var bytes: Int64
    /// The whole size; -1 while an upload of unknown size is not finished.
    public var size: Int64
    /// `waiting`, `running`, `verifying`, `delivering`, `completed`, `failed`, `canceled`,
    /// `expired` (CONTRACT section 8).
    public var state: String
    /// The host's error code, when the transfer failed or waits after a refusal.
    public var error: String?
    /// What the service answered once it took a finished upload.
    public var result: ValueSet?

    public init(
        transfer: UUID, bytes: Int64, size: Int64, state: String, error: String? = nil, result: ValueSet? = nil
    ) {
        self.transfer = transfer
        self.bytes = bytes
        self.size = size
        self.state = state
        self.error = error
        self.result = result
    }

    /// Whether nothing more will happen to the transfer.
    public var hasEnded: Bool { ["completed", "failed", "canceled", "expired"].contains(state) }
}

/// What a download and an upload operation share: their progress, pausing, cancelling, and how
/// a run ends.
final class TransferControl: Sendable {
    let transfer: UUID
    let connection: AtriumConnection
    let progress: AsyncStream<TransferProgress>
    private let sink: AsyncStream<TransferProgress>.Continuation
    private let paused = Atomic<Bool>(false)
    /// For tests: the bytes at which the run pauses itself, once (``pauseOnce(atBytes:)``).
    private let pauseAt = Atomic<Int64>(.max)

    init(transfer: UUID, connection: AtriumConnection) {
        self.transfer = transfer
        self.connection = connection
        (progress, sink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(64))
    }

    /// A run begins: not paused.
    func begin() { paused.store(false, ordering: .relaxed) }

    /// ``pause()`` was called during this run: the run stops at its next step.
    var isPaused: Bool { paused.load(ordering: .relaxed) }

    func tell(_ step: TransferProgress) {
        sink.yield(step)
        guard step.bytes >= pauseAt.load(ordering: .relaxed) else { return }
        pauseAt.store(.max, ordering: .relaxed)
        paused.store(true, ordering: .relaxed)
        Task { [connection, transfer] in try? await connection.sendTransfer(.detach(transfer: transfer)) }
    }

    /// For tests: the run pauses itself at the first step that reaches `bytes`, as ``pause()``
    /// from another task would, but at that very step however loaded the machine is (a task
    /// that watches the progress may run only after the last byte is in).
    func pauseOnce(atBytes bytes: Int64) { pauseAt.store(bytes, ordering: .relaxed) }

    func finish(_ last: TransferProgress) -> TransferProgress {
        sink.yield(last)
        sink.finish()
        return last
    }

    /// Takes a `transferState` into `last` and tells it: true when the transfer completed;
    /// ended otherwise, or waiting after a refusal, throws (`transferFailed`).
    func take(_ state: TransferStateFrame, into last: inout TransferProgress) throws(AtriumClientError) -> Bool {
        last.state = state.state
        last.error = state.error
        if state.size >= 0 { last.size = state.size }
        if let result = try? state.result?.decode() { last.result = result }
        sink.yield(last)
        if state.state == "completed" { return true }
        guard last.hasEnded || state.state == "waiting" && state.error != nil else { return false }
        sink.finish()
        throw AtriumClientError(
            .transferFailed,
            "transfer \(transfer) \(state.state): \(state.error ?? "no reason given")"
                + (last.hasEnded ? "" : "; run it again to resume"))
    }

    /// The transfer's frames ended without an end: paused (the result says `waiting`), or the
    /// connection ended (thrown).
    func interrupted(_ last: TransferProgress) throws(AtriumClientError) -> TransferProgress {
        guard paused.load(ordering: .relaxed) else {
            throw AtriumClientError(
                .hostWentAway, "the connection ended during transfer \(transfer); run it again to resume")
        }
        var waiting = last
        waiting.state = "waiting"
        sink.yield(waiting)
        return waiting
    }

    func pause() async {
        paused.store(true, ordering: .relaxed)
        try? await connection.sendTransfer(.detach(transfer: transfer))
    }

    func cancel() async throws -> TransferProgress {
        let state = try await connection.cancelTransfer(transfer)
        return finish(
            TransferProgress(
                transfer: transfer, bytes: Int64(state.offset), size: state.size, state: state.state,
                error: state.error))
    }
}
