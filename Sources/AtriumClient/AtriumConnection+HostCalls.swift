public import AtriumProtocol
import AtriumTLS
public import AtriumValues
import Foundation
import Synchronization

extension AtriumConnection {
    // MARK: - Host-level calls

    /// Round-trips a `ping` and returns how long it took.
    public func ping(timeout: Duration? = nil) async throws -> Duration {
        let id = makeNumber()
        let start = ContinuousClock.now
        _ = try await call(.ping(id: id), awaiting: .pong(id), timeout: timeout)
        return ContinuousClock.now - start
    }

    /// The host's packages, their remote-capable services and their schemes.
    public func apps(timeout: Duration? = nil) async throws -> [AppInfo] {
        let id = makeNumber()
        guard case .apps(let apps) = try await call(.apps(id: id), awaiting: .apps(id), timeout: timeout) else {
            throw AtriumClientError(.protocolError, "the host answered apps with something else")
        }
        return apps.apps
    }

    /// One package, with what its services take (``AppInfo/interfaces``: the services that
    /// declare commands, and those of declared functions); nil when the host has no such
    /// package. A host older than interfaces answers with every package and none: the
    /// package is found among them, without interfaces.
    public func app(_ package: String, timeout: Duration? = nil) async throws -> AppInfo? {
        let id = makeNumber()
        let answer = try await call(.apps(id: id, package: package), awaiting: .apps(id), timeout: timeout)
        guard case .apps(let apps) = answer else {
            throw AtriumClientError(.protocolError, "the host answered apps with something else")
        }
        return apps.apps.first { $0.package == package }
    }

    /// Asks the host's operator to pair this device (CONTRACT section 7), and waits for the
    /// decision. Over TLS the pairing is committed: this client commits to a nonce, the host
    /// answers with its own, and the six-digit verification code covers both identities and
    /// both nonces. `showCode` gets the code as soon as it is known, before the wait for
    /// the operator: show it, for the person to compare with the one the host shows. A
    /// paired device may then open services, launch URIs and list apps.
    public func pair(
        deviceName: String, timeout: Duration = .seconds(130), showCode: @Sendable (String) -> Void = { _ in }
    ) async throws -> PairedFrame {
        let id = makeNumber()
        guard let host = hostIdentity, let client = clientIdentity else {
            return try await paired(.pair(PairFrame(id: id, deviceName: deviceName)), id: id, timeout: timeout)
        }
        let nonce = PairingCode.makeNonce()
        let first = try await call(
            .pair(PairFrame(id: id, deviceName: deviceName, commitment: PairingCode.commitment(to: nonce))),
            awaiting: .paired(id), timeout: timeout)
        switch first {
        case .paired(let paired):
            return paired
        case .pairNonce(_, let hostNonce):
            guard PairingCode.isWellFormed(hostNonce) else {
                throw AtriumClientError(.protocolError, "the host's pairing nonce is not 64 hex digits")
            }
            showCode(PairingCode.between(host: host, client: client, clientNonce: nonce, hostNonce: hostNonce))
            let revealed = try await paired(.pairReveal(id: id, nonce: nonce), id: id, timeout: timeout)
            // The host's outcome that came before the reveal was answered (it timed out while
            // the reveal was on its way) is the outcome, not the reveal's "nothing waits".
            let earlier = state.withLock { $0.unclaimedPaired.removeValue(forKey: id) }
            return revealed.status == .notPossible ? earlier ?? revealed : revealed
        default:
            throw AtriumClientError(.protocolError, "the host answered pair with something else")
        }
    }

    private func paired(_ frame: ClientFrame, id: UInt64, timeout: Duration) async throws -> PairedFrame {
        guard case .paired(let paired) = try await call(frame, awaiting: .paired(id), timeout: timeout) else {
            throw AtriumClientError(.protocolError, "the host answered pair with something else")
        }
        return paired
    }

    /// Runs an operator's command (local socket only: `pairing.list`, `pairing.accept`,
    /// `pairing.refuse`, `devices.list`, `devices.revoke`) and returns its result.
    ///
    /// - Throws: ``AtriumClientError`` `refused` with the host's reason when it refuses.
    public func admin(_ command: String, _ arguments: ValueSet = [:], timeout: Duration? = nil) async throws
        -> ValueSet
    {
        let id = makeNumber()
        let frame = ClientFrame.admin(
            AdminFrame(id: id, command: command, arguments: arguments.isEmpty ? nil : EncodedValueSet(arguments)))
        guard case .adminResult(let result) = try await call(frame, awaiting: .admin(id), timeout: timeout) else {
            throw AtriumClientError(.protocolError, "the host answered \(command) with something else")
        }
        guard result.status == 0 else {
            throw AtriumClientError(.refused, result.error ?? "the host refused \(command)")
        }
        do {
            return try result.result?.decode() ?? [:]
        } catch {
            throw AtriumClientError(.protocolError, "the host's result for \(command) is not a ValueSet: \(error)")
        }
    }
}
