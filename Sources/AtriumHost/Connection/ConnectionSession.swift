import AtriumProtocol
import AtriumTLS
import AtriumTransfers
import Crypto
import Foundation
import Logging
import NIOCore

/// Who is on the other end of a connection, and whether it may be served: `hello` and its
/// token, the TLS identity, the client's authorization (and the frame limit that follows
/// from it), the hello and idle deadlines, `ping`, the refusal of what a client that is not
/// authorized sends, the audit lines of the connection, and cutting the connection off when
/// the operator revokes its device or token.
///
/// On the connection's event loop only, as its ``ConnectionHandler`` is; it reads and writes
/// through the handler it is given.
final class ConnectionSession {
    /// Whether the client may use services, launch and list apps: a local client, any client
    /// when pairing is not required, or a paired device.
    private(set) var authorized = false
    /// The `atriumd token` the client came with, and the services it covers (nil: all).
    private var tokenName: String?
    private var tokenServices: [String]?
    private(set) var clientId = ""
    /// Whom the transfers made for this client belong to, from its `hello`.
    private(set) var owner: TransferOwner?
    private(set) var clientName: String?
    /// The client's address, for the log and the paired devices' list ("local" on the local
    /// socket), and what the per-address limits count it as (``ConnectionHandler/peerKey(_:)``).
    private(set) var peerAddress = "local"
    private(set) var peerKey = "local"
    /// The task that closes the connection when the hello deadline or the idle timeout passes.
    private var deadline: Scheduled<Void>?
    /// How many frames of this connection were refused because it is not authorized: one
    /// that keeps sending them is closed at ``maxRefusedFrames``.
    private var refusedFrames = 0

    /// The frame limit of this connection now: `limits.maxFrameBytes` once the client is
    /// authorized, ``unauthorizedFrameBytes`` before (``FrameInput`` reads it).
    let frameLimit: FrameLimit
    private let limits: ProtocolLimits

    /// The most bytes a frame of a client that is not authorized may have.
    static let unauthorizedFrameBytes = 64 << 10
    /// The most frames refused to a client that is not authorized before its connection is
    /// closed: a client that pairs, or opens what it may, does not send many.
    static let maxRefusedFrames = 32

    init(isLocal: Bool, core: HostCore) {
        limits = core.limits
        // A remote client is held to a small frame limit until it is authorized (a paired
        // device, a token): what a stranger can make the host buffer, over the many connections
        // it may open, stays small.
        frameLimit = FrameLimit(
            bytes: Self.frameBytes(authorized: isLocal || !core.pairingRequired, limits: core.limits))
    }

    /// The frame limit of a client that is authorized, or not.
    private static func frameBytes(authorized: Bool, limits: ProtocolLimits) -> Int {
        authorized ? limits.maxFrameBytes : min(limits.maxFrameBytes, unauthorizedFrameBytes)
    }

    /// The client became authorized (or is no longer): its frame limit follows.
    private func authorize(_ authorized: Bool) {
        self.authorized = authorized
        frameLimit.bytes = Self.frameBytes(authorized: authorized, limits: limits)
    }

    /// The limits this client is told in its welcome: the frame and message limits it has now.
    private var toldLimits: ProtocolLimits {
        var told = limits
        told.maxFrameBytes = min(limits.maxFrameBytes, frameLimit.bytes)
        told.maxMessageBytes = min(limits.maxMessageBytes, max(told.maxFrameBytes - 1024, 0))
        return told
    }

    /// Who this client is, as a service's access sees it.
    func caller(isLocal: Bool, identity: String?) -> Router.Caller {
        Router.Caller(isRemote: !isLocal, authorized: authorized, identity: identity, tokenServices: tokenServices)
    }

    // MARK: - The connection's start and end

    /// The connection's peer, a TCP client's address.
    func connected(remote: SocketAddress) {
        peerAddress = remote.ipAddress ?? "\(remote)"
        peerKey = ConnectionHandler.peerKey(remote) ?? peerAddress
    }

    /// The connection is admitted: the client has the hello timeout to send `hello`.
    func admitted(on connection: ConnectionHandler) {
        armDeadline(after: connection.admission.helloTimeout, on: connection)
    }

    /// The connection is gone: its deadline with it.
    func ended() {
        deadline?.cancel()
        deadline = nil
    }

    // MARK: - Deadlines

    /// Closes the connection at `delay` from now unless, by then, the deadline has moved:
    /// before `hello`, the hello deadline; after it, the idle timeout since the last frame.
    private func armDeadline(after delay: Duration, on connection: ConnectionHandler) {
        deadline = connection.schedule(in: .init(delay)) { connection in
            connection.session.deadlinePassed(on: connection)
        }
    }

    private func deadlinePassed(on connection: ConnectionHandler) {
        let admission = connection.admission
        switch connection.machine.deadlinePassed(
            idle: NIODeadline.now() - connection.lastFrame, idleTimeout: TimeAmount(admission.idleTimeout))
        {
        case .none:
            return
        case .helloTimeout:
            connection.core.breaches.record(
                "hello timeout", level: .notice, "a connection sent no hello in time; closed")
            connection.protocolError(
                FrameError(.timedOut, "no hello within \(describe(admission.helloTimeout)) of connecting"), log: false)
        case .idleTimeout:
            connection.core.breaches.record(
                "idle timeout", level: .notice, "a connection sent nothing for the idle timeout; closed")
            connection.protocolError(
                FrameError(.timedOut, "no frame for \(describe(admission.idleTimeout)), the idle timeout"), log: false)
        case .rearm(let remaining):
            armDeadline(after: .nanoseconds(remaining.nanoseconds), on: connection)
        }
    }

    // MARK: - hello and ping

    func hello(_ hello: HelloFrame, on connection: ConnectionHandler) {
        let core = connection.core
        guard hello.version == atriumProtocolVersion else {
            connection.protocolError(
                FrameError(
                    .unsupportedVersion,
                    "protocol version \(hello.version) is not supported; this host speaks version \(atriumProtocolVersion)"
                )
            )
            return
        }
        let isLocal = connection.isLocal
        let verdict: TokenGate.Verdict
        switch core.tokens.check(hello.token, isLocal: isLocal) {
        case .failure(let refusal):
            audit("token.refused", ["reason": refusal.reason], on: connection)
            core.breaches.record("token refused", "hello refused: \(refusal.reason)")
            connection.protocolError(FrameError(.notAuthorized, refusal.reason), log: false)
            return
        case .success(let checked):
            verdict = checked
        }
        let transport = connection.transport
        if transport.isTLS, let pipeline = connection.pipeline {
            transport.identify(in: pipeline)
            guard transport.peerIdentity != nil else {
                connection.protocolError(
                    FrameError(.notAuthorized, "TLS without a client certificate: present an identity"))
                return
            }
        }
        connection.machine.helloAccepted()
        var authorized =
            isLocal || !core.pairingRequired || (transport.peerIdentity.map(core.devices.isPaired) ?? false)
        if case .managed(let token) = verdict {
            // A token serves its holder as a paired device is served, within its services.
            authorized = true
            tokenName = token.name
            tokenServices = token.services
            core.tokens.note(token.name)
        }
        if authorized, let identity = transport.peerIdentity, core.pairingRequired {
            core.devices.seen(identity, from: peerAddress)
        }
        authorize(authorized)
        let owner = Self.owner(
            identity: transport.peerIdentity, token: verdict, hello: hello, localUser: connection.localUser,
            isLocal: isLocal)
        connection.link?.slot.book.withLock { book in
            book.clientId = hello.clientId
            book.owner = owner
        }
        self.owner = owner
        clientId = hello.clientId
        clientName = hello.clientName
        connection.logger[metadataKey: "client"] = "\(untrusted(hello.clientId, limit: 64))"
        if let identity = transport.peerIdentity { connection.logger[metadataKey: "identity"] = "\(identity)" }
        if hello.token != nil { audit("token.accepted", tokenName.map { ["token": $0] } ?? [:], on: connection) }
        connection.logger.debug(
            "hello", metadata: ["transport": "\(transport.isTLS ? "TLS" : isLocal ? "local" : "plain TCP")"])
        deadline?.cancel()
        armDeadline(after: connection.admission.idleTimeout, on: connection)
        connection.write(
            .welcome(
                WelcomeFrame(
                    hostId: core.configuration.hostId, hostName: core.configuration.hostName, limits: toldLimits,
                    hostIdentity: core.identity, kind: core.configuration.kind,
                    responseTimeoutMilliseconds: UInt64(core.configuration.responseTimeout.seconds * 1000))
            )
        )
    }

    /// Whom the transfers made for this client belong to (CONTRACT section 8): its TLS
    /// identity, else its token (a managed token by its name, one from the token file by its
    /// digest: never the secret itself), else its local user, else its `clientId`.
    static func owner(
        identity: String?, token: TokenGate.Verdict, hello: HelloFrame, localUser: UInt32?, isLocal: Bool
    ) -> TransferOwner {
        if let identity { return .identity(identity) }
        switch token {
        case .managed(let token): return .token(token.name)
        case .fromFile:
            let digest = SHA256.hash(data: Data((hello.token ?? "").utf8))
            return .token("file:" + digest.prefix(16).map { String(format: "%02x", $0) }.joined())
        case .none: break
        }
        if isLocal, let localUser { return .localUser(localUser) }
        return .client(hello.clientId)
    }

    func ping(id: UInt64, on connection: ConnectionHandler) {
        connection.write(.pong(id: id))
    }

    // MARK: - Clients that are not authorized

    /// Answers `frame` and returns true when the client may not send it (CONTRACT section 7:
    /// only hello, ping and pair are served before pairing, and `open` of a service that takes
    /// anyone); a client that keeps sending such frames is closed.
    func refused(_ frame: ClientFrame, on connection: ConnectionHandler) -> Bool {
        guard !authorized, let refusal = Self.refusal(of: frame) else { return false }
        connection.core.breaches.record(
            "unpaired client refused", level: .info, "\(frame.type) from a device that is not paired")
        var fields = ["frame": frame.type]
        if case .launch(let launch) = frame {
            fields["scheme"] = untrusted(launch.uri.split(separator: ":").first.map(String.init) ?? "", limit: 64)
        }
        audit("unpaired.refused", fields, on: connection)
        connection.write(refusal)
        countRefusedFrame(on: connection)
        return true
    }

    /// What an unpaired client gets for `frame`, or nil when the frame is served.
    private static func refusal(of frame: ClientFrame) -> HostFrame? {
        let reason =
            "this device is not paired with the host: pair first (atrium pair HOST), and have the host's operator accept it"
        switch frame {
        case .open:
            // The service's access decides: an unpaired device may open only a service whose
            // manifest says "any".
            return nil
        case .launch(let launch):
            return .launched(LaunchedFrame(id: launch.id, status: .deniedByRemoteSystem, error: reason))
        case .apps:
            return .error(ErrorFrame(code: .notAuthorized, message: reason))
        case .admin(let admin):
            return .adminResult(
                AdminResultFrame(id: admin.id, status: 1, error: "admin commands are taken on the local socket only"))
        case .request(let request):
            return .response(
                ResponseFrame(channel: request.channel, id: request.id, status: .authenticationError, error: reason))
        case .response(let response):
            return .error(
                ErrorFrame(code: .notAuthorized, message: "response \(response.id) answers nothing: \(reason)"))
        case .close(let channel):
            return .error(ErrorFrame(code: .notAuthorized, message: "channel \(channel) is not open: \(reason)"))
        case .hello, .ping, .pair, .pairReveal, .unknown:
            return nil
        case .transfer(let transfer):
            // A client that is not authorized may send no request, so no service can have made
            // a transfer for it: it has none to move or ask about.
            return .error(ErrorFrame(code: .notAuthorized, message: "\(transfer.type) refused: \(reason)"))
        }
    }

    /// Counts a frame refused because the client is not authorized; past the limit, the
    /// connection is closed with a reason.
    func countRefusedFrame(on connection: ConnectionHandler) {
        guard !authorized else { return }
        refusedFrames += 1
        guard refusedFrames > Self.maxRefusedFrames else { return }
        connection.core.breaches.record(
            "unpaired client closed", level: .info,
            "a connection that is not paired sent \(Self.maxRefusedFrames) refused frames; closed")
        connection.protocolError(
            FrameError(
                .notAuthorized,
                "\(Self.maxRefusedFrames) frames refused: this device is not paired with the host; pair first (atrium pair HOST)"
            ), log: false)
    }

    // MARK: - Pairing and revocation

    /// The client's device is paired now (accepted by the operator, or found paired when it
    /// asked): it is served as a paired device from here on.
    func paired() {
        authorize(true)
    }

    /// Tokens were revoked: if this connection came with one that is gone, it is cut off now.
    func tokenStillValid(among names: Set<String>, on connection: ConnectionHandler) {
        guard let tokenName, !names.contains(tokenName) else { return }
        self.tokenName = nil
        authorize(false)
        audit("token.revoked", ["token": tokenName], on: connection)
        // The operator's own doing, not a breach by the client.
        connection.logger.info("a connection of token \(tokenName) cut off: the token was revoked")
        connection.protocolError(
            FrameError(.notAuthorized, "this connection's token was revoked by the host's operator"), log: false)
    }

    /// A device was unpaired: if it is this connection's, the connection is cut off now.
    func deviceRevoked(_ identity: String, on connection: ConnectionHandler) {
        guard connection.transport.peerIdentity == identity, !connection.isLocal, connection.core.pairingRequired
        else { return }
        authorize(false)
        // The operator's own doing, not a breach by the client.
        connection.logger.info("a connection of device \(identity) cut off: its pairing was revoked")
        connection.protocolError(
            FrameError(.notAuthorized, "this device's pairing was revoked by the host's operator"), log: false)
    }

    // MARK: - The audit log

    /// Writes a security event to the audit log, with who the client is. The events of a
    /// client that is not authorized are aggregated by its address (``AuditLog``), unless
    /// `always` (a pairing request, which the operator must see, and which the pairing limits
    /// bound already).
    func audit(
        _ event: String, _ fields: [String: String] = [:], always: Bool = false, on connection: ConnectionHandler
    ) {
        guard let audit = connection.core.audit else { return }
        var fields = fields
        if !clientId.isEmpty { fields["client"] = untrusted(clientId, limit: 64) }
        let transport = connection.transport
        fields["transport"] = connection.isLocal ? "local" : transport.isTLS ? "tls" : "tcp"
        if !connection.isLocal {
            fields["address"] = peerAddress
            if let identity = transport.peerIdentity { fields["device"] = identity }
        }
        audit.record(event, fields, stranger: authorized || always ? nil : peerAddress)
    }
}
