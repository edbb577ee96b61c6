import AtriumProtocol

/// Whoever moves a transfer's bytes now: a connection of frames, or a request over HTTP. What
/// the host has to tell it (an `ack`, a `transferState`, an `attached` elsewhere) goes
/// through ``tell(_:)``, which hands it to the peer's own event loop.
struct TransferPeer: Sendable {
    private let told: @Sendable (HostTransferFrame) -> Void

    init(tell: @escaping @Sendable (HostTransferFrame) -> Void) {
        told = tell
    }

    init(_ link: ConnectionLink) {
        told = { frame in link.run { $0.write(.transfer(frame)) } }
    }

    func tell(_ frame: HostTransferFrame) { told(frame) }
}

extension ConnectionLink {
    /// Writes a transfer frame on the connection, from any thread.
    func tell(_ frame: HostTransferFrame) { run { $0.write(.transfer(frame)) } }
}
