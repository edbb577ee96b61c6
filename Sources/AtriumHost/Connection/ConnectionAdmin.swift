import AtriumProtocol
import AtriumValues
import NIOCore

/// The operator's commands on a connection (`admin` frames: pairing decisions, devices,
/// tokens, reload, status): taken on the local socket only, carried out by ``AdminCommands``,
/// answered with `adminResult`. It holds no state: each command stands alone.
///
/// On the connection's event loop only; it writes through the handler it is given.
enum ConnectionAdmin {
    static func admin(_ admin: AdminFrame, on connection: ConnectionHandler) {
        guard connection.isLocal else {
            connection.core.breaches.record(
                "admin command refused", level: .info, "an admin command from a TCP client refused")
            connection.write(
                .adminResult(
                    AdminResultFrame(
                        id: admin.id, status: 1, error: "admin commands are taken on the local socket only")))
            return
        }
        guard let eventLoop = connection.eventLoop else { return }
        AdminCommands.run(admin, core: connection.core, on: eventLoop).assumeIsolated().whenSuccess { outcome in
            switch outcome {
            case .success(let result):
                connection.write(
                    .adminResult(AdminResultFrame(id: admin.id, status: 0, result: EncodedValueSet(result))))
            case .failure(let refusal):
                connection.write(.adminResult(AdminResultFrame(id: admin.id, status: 1, error: refusal.description)))
            }
        }
    }
}
