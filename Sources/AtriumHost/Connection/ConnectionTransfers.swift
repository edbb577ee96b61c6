import AtriumProtocol
import AtriumValues
import Foundation

/// A connection's transfer frames (CONTRACT section 8): `attach`, `chunk`, `ack`, `detach`,
/// `cancelTransfer` and `transfers`.
///
/// No service can offer or accept a file yet (the plugin ABI for it comes with the transfers'
/// table in the host), so the host has no transfer of anyone's: every frame names a transfer
/// its caller does not have, and is answered as section 8 says for one: `attach` with status 1
/// and `notFound`, `cancelTransfer` with the transfer's state `failed` and `notFound`,
/// `transfers` with none and cursor 0; `chunk`, `ack` and `detach` are ignored. A client that
/// is not authorized gets none of these: its transfer frames are refused and counted
/// (``ConnectionSession``).
///
/// On the connection's event loop only; it writes through the handler it is given.
enum ConnectionTransfers {
    static func frame(_ frame: ClientTransferFrame, on connection: ConnectionHandler) {
        switch frame {
        case .attach(let attach):
            connection.write(
                .transfer(
                    .attached(
                        AttachedFrame(
                            id: attach.id, transfer: attach.transfer, status: .failure, direction: "download",
                            size: -1, offset: 0, chunkBytes: 0, window: 0, expires: Timestamp(Date()),
                            error: notFound))))
        case .cancel(let transfer):
            connection.write(
                .transfer(
                    .state(
                        TransferStateFrame(transfer: transfer, state: "failed", offset: 0, size: -1, error: notFound))))
        case .transfers(let query):
            connection.write(.transfer(.transfers(TransfersFrame(id: query.id, transfers: [], cursor: 0))))
        case .chunk, .ack, .detach:
            connection.logger.debug(
                "\(frame.type) for transfer \(frame.transfer.map { "\($0)" } ?? "?"), which the client does not have; ignored"
            )
        }
    }

    /// The error of a frame about a transfer the caller does not have.
    static let notFound = "notFound"
}
