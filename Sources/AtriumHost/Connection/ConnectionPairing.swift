import AtriumProtocol
import AtriumTLS
import NIOCore

/// A connection's pairing (CONTRACT section 7): `pair` and `pairReveal`, the commitment and
/// nonces, filing the request before the operator, the operator's decision, and the timeouts
/// of each stage. One pairing at a time per connection; it leaves with its connection.
///
/// On the connection's event loop only; it reads and writes through the handler it is given.
final class ConnectionPairing {
    /// Where this connection's pairing stands, and its timeout.
    private var stage = Stage.none
    private var timer: Scheduled<Void>?

    enum Stage {
        case none
        /// The host sent its nonce and waits for the client's.
        case awaitingReveal(id: UInt64, deviceName: String, commitment: String, hostNonce: String)
        /// The request is before the operator.
        case filed(UInt64)
    }

    func pair(_ pair: PairFrame, on connection: ConnectionHandler) {
        let id = pair.id
        let core = connection.core
        let session = connection.session
        let answer = { (status: PairingStatus, error: String?) in
            connection.write(.paired(PairedFrame(id: id, status: status, error: error)))
        }
        if session.authorized && (connection.isLocal || !core.pairingRequired) {
            answer(.paired, nil)
            return
        }
        guard let identity = connection.transport.peerIdentity, core.identity != nil else {
            answer(
                .notPossible, "pairing needs TLS: a device is known by its TLS identity, and this connection has none")
            return
        }
        if core.devices.isPaired(identity) {
            session.paired()
            answer(.paired, nil)
            return
        }
        guard case .none = stage else {
            answer(.notPossible, "this connection already asked to pair")
            return
        }
        // Counted before anything else is done for it: each attempt is a try at the code.
        // Each address (an IPv6 address's /64) has its share of attempts.
        if let refusal = core.devices.admitAttempt(from: session.peerKey) {
            core.breaches.record("pairing refused", level: .info, "a pairing attempt refused: \(refusal)")
            answer(.notPossible, refusal.description)
            return
        }
        let deviceName = DeviceRegistry.cleanName(pair.deviceName)
        guard let commitment = pair.commitment else {
            file(id: id, deviceName: deviceName, code: nil, on: connection)
            return
        }
        guard PairingCode.isWellFormed(commitment) else {
            answer(.notPossible, "the commitment must be 64 lowercase hex digits (a SHA-256)")
            return
        }
        let hostNonce = PairingCode.makeNonce()
        stage = .awaitingReveal(id: id, deviceName: deviceName, commitment: commitment, hostNonce: hostNonce)
        timer = connection.schedule(in: TimeAmount(core.configuration.pairingTimeout)) { connection in
            connection.pairing.revealTimedOut(id: id, on: connection)
        }
        connection.write(.pairNonce(id: id, nonce: hostNonce))
    }

    private func revealTimedOut(id: UInt64, on connection: ConnectionHandler) {
        guard case .awaitingReveal = stage else { return }
        stage = .none
        connection.write(.paired(PairedFrame(id: id, status: .timedOut, error: "the nonce was not revealed in time")))
    }

    func reveal(id: UInt64, nonce: String, on connection: ConnectionHandler) {
        guard case .awaitingReveal(let expected, let deviceName, let commitment, let hostNonce) = stage,
            expected == id
        else {
            connection.write(
                .paired(PairedFrame(id: id, status: .notPossible, error: "no pairing of this id waits for a nonce")))
            return
        }
        stage = .none
        timer?.cancel()
        timer = nil
        guard PairingCode.isWellFormed(nonce), PairingCode.commitment(to: nonce) == commitment else {
            connection.core.breaches.record(
                "pairing refused", level: .info, "a pairing nonce that does not match its commitment")
            connection.write(
                .paired(
                    PairedFrame(
                        id: id, status: .notPossible, error: "the nonce does not match the commitment sent in pair")
                ))
            return
        }
        file(id: id, deviceName: deviceName, code: (clientNonce: nonce, hostNonce: hostNonce), on: connection)
    }

    /// Puts the pairing before the operator, with its verification code (from both nonces
    /// when the client committed to one).
    private func file(
        id: UInt64, deviceName: String, code nonces: (clientNonce: String, hostNonce: String)?,
        on connection: ConnectionHandler
    ) {
        let core = connection.core
        guard let identity = connection.transport.peerIdentity, let hostIdentity = core.identity else { return }
        let code =
            nonces.map {
                PairingCode.between(
                    host: hostIdentity, client: identity, clientNonce: $0.clientNonce, hostNonce: $0.hostNonce)
            } ?? PairingCode.between(host: hostIdentity, client: identity)
        let link = connection.link
        let peerAddress = connection.session.peerAddress
        let filed = core.devices.request(
            identity: identity, deviceName: deviceName, address: peerAddress, code: code
        ) { status, error in
            link?.run { connection in connection.pairing.decided(id: id, status: status, error: error, on: connection) }
        }
        switch filed {
        case .failure(let refusal):
            connection.write(.paired(PairedFrame(id: id, status: .notPossible, error: refusal.description)))
        case .success(let request):
            connection.session.audit(
                "pairing.requested",
                ["request": "\(request.number)", "name": deviceName, "code": code, "committed": "\(nonces != nil)"],
                always: true, on: connection)
            stage = .filed(request.number)
            let devices = core.devices
            timer = connection.eventLoop?.scheduleTask(in: TimeAmount(core.configuration.pairingTimeout)) {
                devices.withdraw(request.number, timedOut: true)
            }
            connection.logger.notice(
                "pairing request \(request.number) from \"\(deviceName)\" at \(peerAddress): verification code \(code); accept with `atrium pairing accept \(request.number)`, refuse with `atrium pairing refuse \(request.number)`",
                metadata: ["identity": "\(identity)"])
            if nonces == nil {
                connection.logger.warning(
                    "pairing request \(request.number) came without a commitment: its code depends on the identities alone, which someone in the middle able to make a million keys in \(core.configuration.pairingTimeout) could match; accept it only over a network you trust"
                )
            }
        }
    }

    /// The operator decided this connection's pairing request (or it timed out).
    private func decided(id: UInt64, status: PairingStatus, error: String?, on connection: ConnectionHandler) {
        connection.session.audit(
            status == .paired ? "pairing.accepted" : status == .refused ? "pairing.refused" : "pairing.timedOut",
            always: true, on: connection)
        stage = .none
        timer?.cancel()
        timer = nil
        if status == .paired { connection.session.paired() }
        connection.write(.paired(PairedFrame(id: id, status: status, error: error)))
    }

    /// The connection is gone: a pairing request leaves with it (there is no one left to tell).
    func ended(core: HostCore) {
        if case .filed(let number) = stage { core.devices.withdraw(number, timedOut: false) }
        stage = .none
        timer?.cancel()
        timer = nil
    }
}
