public import AtriumValues
public import Foundation

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
