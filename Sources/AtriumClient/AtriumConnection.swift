public import AtriumProtocol
public import AtriumTLS
public import AtriumValues
public import Foundation
public import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// Where a host listens: `host:port` (TCP, a remote client), a bare `host` (port 7340), or
/// `unix:/path/to/atriumd.sock` (the host's local socket).
public struct AtriumEndpoint: Sendable, Hashable, LosslessStringConvertible {
    public enum Address: Sendable, Hashable {
        case tcp(host: String, port: Int)
        case unix(path: String)
    }

    public var address: Address

    public init(_ address: Address) { self.address = address }

    /// Parses `host:port`, `host`, `[::1]:7340`, `unix:/path`, or `unix:` alone (the host's
    /// default local socket, ``defaultLocalSocket``); nil for anything else.
    public init?(_ text: String) {
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst("unix:".count))
            address = .unix(path: path.isEmpty ? defaultLocalSocketPath() : path)
            return
        }
        var host = text
        var port = 7340
        if let colon = text.lastIndex(of: ":"), !text.hasSuffix("]") {
            guard let parsed = Int(text[text.index(after: colon)...]), (1...65535).contains(parsed) else { return nil }
            port = parsed
            host = String(text[..<colon])
        }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty, !host.contains(where: { "/= ".contains($0) }) else { return nil }
        address = .tcp(host: host, port: port)
    }

    public var description: String {
        switch address {
        case .tcp(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        case .unix(let path): "unix:\(path)"
        }
    }

    /// The host's local socket where atriumd puts it by default: `$XDG_RUNTIME_DIR/atrium/atriumd.sock`,
    /// or `/tmp/atrium-UID/atriumd.sock` without it.
    public static var defaultLocalSocket: AtriumEndpoint { AtriumEndpoint(.unix(path: defaultLocalSocketPath())) }

    /// Whether the host is on this machine: the Unix socket, or a loopback TCP address
    /// (127.0.0.0/8, ::1, localhost).
    public var isLoopback: Bool {
        switch address {
        case .tcp(let host, _): isLoopbackHost(host)
        case .unix: true
        }
    }
}

/// TLS for a TCP connection (CONTRACT section 7): the client's own identity, presented to
/// the host, and the host's identity when it is known (pinned): a host that presents any
/// other is refused, with both identities in the error.
public struct ClientTLS: Sendable {
    public var identity: TLSIdentity
    public var expectedHostIdentity: String?

    public init(identity: TLSIdentity, expectedHostIdentity: String? = nil) {
        self.identity = identity
        self.expectedHostIdentity = expectedHostIdentity
    }

    /// The known hosts kept beside this client's identity.
    var knownHosts: KnownHosts { KnownHosts(folder: identity.keyFile.deletingLastPathComponent()) }

    /// The identity kept in `$XDG_STATE_HOME/atrium` (or `~/.local/state/atrium`) as
    /// `client-key.pem` and `client-cert.pem`, made there at first use.
    public static func defaultIdentity(in folder: URL? = nil) throws -> TLSIdentity {
        let folder = folder ?? TLSIdentity.defaultStateFolder()
        return try TLSIdentity.loadOrCreate(
            in: folder, name: "client", commonName: "atrium client on \(ProcessInfo.processInfo.hostName)")
    }
}

/// One connection to an Atrium host, shared by any number of ``AppServiceConnection``s (each
/// is a channel on it), with the host-level calls: ``ping()``, ``apps()``.
///
/// All methods are safe to call from any task. Every call has a timeout, honours
/// cancellation (a cancelled call leaves nothing behind; a late answer is dropped), and fails
/// with ``AtriumClientError`` (`hostWentAway`, with the host's reason when it sent one) when
/// the connection ends.
public final class AtriumConnection: Sendable {
    /// The host's `welcome`: its identity and limits.
    public let welcome: WelcomeFrame
    /// Where the host was reached.
    public let endpoint: AtriumEndpoint
    /// The host's identity as its TLS certificate proved it; nil on plain TCP and the Unix
    /// socket.
    public let hostIdentity: String?
    /// This client's own identity, when it speaks TLS.
    public let clientIdentity: String?
    /// How long calls wait for an answer unless told otherwise.
    public let defaultTimeout: Duration
    /// How long the host waits for its services' answers (from hosts that say).
    public var hostResponseTimeout: Duration? { welcome.hostResponseTimeout }
    let channel: any Channel
    let state: Mutex<ClientState>

    /// What a call waits for.
    enum WaitKey: Hashable {
        case opened(UInt64)
        case response(UInt64, UInt64)
        case pong(UInt64)
        case paired(UInt64)
        case admin(UInt64)
        case apps(UInt64)
        case launched(UInt64)
    }

    struct Waiter {
        var continuation: CheckedContinuation<HostFrame, any Error>
        var timer: Scheduled<Void>?
    }

    struct ClientState {
        var nextNumber: UInt64 = 1
        var waiters: [WaitKey: Waiter] = [:]
        var channels: [UInt64: ChannelEvents] = [:]
        /// Set when the connection has ended: every call fails with it.
        var ended: AtriumClientError?
        /// The last `error` frame from the host, the likely reason for an end.
        var lastError: ErrorFrame?
        /// `paired` frames that came while no call waited for them (the host's pairing timeout
        /// can fire between its nonce and the client's reveal), by id: the few latest.
        var unclaimedPaired: [UInt64: PairedFrame] = [:]
    }

    /// Where a channel's events go: the service's messages, and its closing.
    struct ChannelEvents {
        var requests: AsyncStream<AppServiceRequest>.Continuation
        var closed: AsyncStream<AppServiceClosedStatus>.Continuation
    }

    /// Connects, says `hello` (as `clientId`, a random one by default), and waits for `welcome`.
    /// With `tls`, a TCP connection speaks TLS 1.3 with the client's identity; without it,
    /// plain TCP (which a host takes only on loopback unless its operator allows otherwise).
    /// The Unix socket never uses TLS.
    ///
    /// - Throws: ``AtriumClientError`` `cannotConnect` (with the reason and the address),
    ///   `timedOut`, `hostIdentityChanged` when the host is not the one expected (both
    ///   identities in the message), or `protocolError` when the host refuses the client.
    ///
    /// `timeout` bounds the connection and the handshake, and is how long each call waits for
    /// its answer unless told otherwise. Without it: 10 s to connect, and calls wait
    /// ``answerTimeout(hostSays:)``: 5 s more than the host's response timeout, so that a
    /// service that does not answer is reported by the host, with its status and the reason,
    /// before this client gives up.
    public static func connect(
        to endpoint: AtriumEndpoint,
        clientId: String? = nil,
        clientName: String? = nil,
        token: String? = nil,
        tls: ClientTLS? = nil,
        timeout: Duration? = nil,
        group: (any EventLoopGroup)? = nil
    ) async throws -> AtriumConnection {
        let given = timeout
        let timeout = timeout ?? .seconds(10)
        // A token is a bearer secret, and `hello` carries it before anything else: it goes only
        // to a host whose identity TLS checks against one this client knows, or over loopback.
        // Otherwise it would go to whoever answers at the address (or advertises the name).
        if token != nil, case .tcp = endpoint.address, !endpoint.isLoopback, tls?.expectedHostIdentity == nil {
            throw AtriumClientError(
                .cannotConnect,
                "a token is sent only to a host whose identity this client knows, and \(endpoint) is not one: pair with it, or pass the identity atriumd prints at start (ClientTLS's expectedHostIdentity; atrium --host-identity)"
            )
        }
        let tlsContext: NIOSSLContext?
        if let tls, case .tcp = endpoint.address {
            do {
                tlsContext = try tls.identity.makeClientContext()
            } catch {
                throw AtriumClientError(.cannotConnect, "cannot set up TLS with the client's identity: \(error)")
            }
        } else {
            tlsContext = nil
        }
        let check = PeerCertificateCheck(expecting: tls?.expectedHostIdentity)
        let handler = ClientFrameHandler(check: tlsContext == nil ? nil : check, endpoint: endpoint)
        var bootstrap = ClientBootstrap(group: group ?? MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.init(timeout))
        if case .tcp = endpoint.address {
            // TCP only: on a Unix socket this option's number means SO_DEBUG, which only
            // root may set, so every other user's connection would fail.
            bootstrap = bootstrap.channelOption(.socketOption(.tcp_nodelay), value: 1)
        }
        bootstrap =
            bootstrap
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tlsContext {
                        try channel.pipeline.syncOperations.addHandler(
                            NIOSSLClientHandler(
                                context: tlsContext, serverHostname: nil, customVerificationCallback: check.verify))
                    }
                    try channel.pipeline.syncOperations.addHandlers([
                        ByteToMessageHandler(FrameDecoder<HostFrame>(maxFrameBytes: 64 << 20)),
                        MessageToByteHandler(FrameEncoder<ClientFrame>()),
                        handler,
                    ])
                }
            }
        let channel: any Channel
        do {
            switch endpoint.address {
            case .tcp(let host, let port): channel = try await bootstrap.connect(host: host, port: port).get()
            case .unix(let path): channel = try await bootstrap.connect(unixDomainSocketPath: path).get()
            }
        } catch {
            let text = "\(error)"
            let reason =
                ["Connection refused", "No such file or directory", "timed out", "Permission denied"]
                .first { text.localizedCaseInsensitiveContains($0) }?.lowercased() ?? text
            throw AtriumClientError(
                .cannotConnect,
                "cannot connect to \(endpoint): \(reason). Is atriumd running there (and listening on that address)?"
            )
        }
        let welcome: WelcomeFrame
        do {
            welcome = try await handler.handshake(
                on: channel,
                hello: HelloFrame(
                    clientId: clientId ?? "atrium-client-\(UUID().uuidString.prefix(8).lowercased())",
                    clientName: clientName,
                    token: token
                ),
                timeout: timeout
            )
        } catch {
            try? await channel.close()
            throw error
        }
        // The identity TLS proved and the one the host says it has are the same, or something
        // between the two (a proxy with a certificate of its own) ends TLS.
        let proven = tlsContext == nil ? nil : try await channel.eventLoop.submit { check.identity }.get()
        if let proven, welcome.hostIdentity != proven {
            try? await channel.close()
            throw AtriumClientError(
                .hostIdentityChanged,
                "\(endpoint) proved the TLS identity \(proven), but says it is \(welcome.hostIdentity ?? "nothing"): something between you and the host ends TLS with a certificate of its own; the connection was closed"
            )
        }
        let connection = AtriumConnection(
            channel: channel, endpoint: endpoint, welcome: welcome, hostIdentity: proven,
            clientIdentity: proven == nil ? nil : tls?.identity.fingerprint,
            timeout: given ?? Self.answerTimeout(hostSays: welcome.hostResponseTimeout))
        handler.attach(connection)
        return connection
    }

    init(
        channel: any Channel, endpoint: AtriumEndpoint, welcome: WelcomeFrame, hostIdentity: String?,
        clientIdentity: String?, timeout: Duration
    ) {
        self.channel = channel
        self.endpoint = endpoint
        self.welcome = welcome
        self.hostIdentity = hostIdentity
        self.clientIdentity = clientIdentity
        self.defaultTimeout = timeout
        self.state = Mutex(ClientState())
    }

    /// The host's limits, from `welcome`.
    public var limits: ProtocolLimits { welcome.limits }

    /// A fresh number for a channel or a request.
    func makeNumber() -> UInt64 {
        state.withLock { state in
            defer { state.nextNumber += 1 }
            return state.nextNumber
        }
    }

    /// Sends `frame` and waits for the frame that `key` names.
    func call(_ frame: ClientFrame, awaiting key: WaitKey, timeout: Duration?) async throws -> HostFrame {
        let timeout = timeout ?? defaultTimeout
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let failure = state.withLock { state -> (any Error)? in
                    if let ended = state.ended { return ended }
                    state.waiters[key] = Waiter(continuation: continuation, timer: nil)
                    return nil
                }
                if let failure {
                    continuation.resume(throwing: failure)
                    return
                }
                let timer = channel.eventLoop.scheduleTask(in: .init(timeout)) {
                    self.fail(key, AtriumClientError(.timedOut, self.noAnswer(to: frame, within: timeout)))
                }
                state.withLock { state in
                    if state.waiters[key] != nil { state.waiters[key]!.timer = timer } else { timer.cancel() }
                }
                if Task.isCancelled {
                    fail(key, CancellationError())
                    return
                }
                channel.writeAndFlush(frame).whenFailure { error in
                    self.fail(key, AtriumClientError(.hostWentAway, "could not send \(frame.type): \(error)"))
                }
            }
        } onCancel: {
            fail(key, CancellationError())
        }
    }

    /// What a call that timed out says: which side did not answer, when the host told how long
    /// it waits for its services.
    func noAnswer(to frame: ClientFrame, within timeout: Duration) -> String {
        let waited = "no answer within \(Self.describe(timeout)) (\(frame.type))"
        let forService: Bool
        switch frame {
        case .open, .request, .launch: forService = true
        default: forService = false
        }
        guard forService, let hostTimeout = hostResponseTimeout else {
            return "no answer from the host within \(Self.describe(timeout)) (\(frame.type))"
        }
        if timeout > hostTimeout {
            return
                "\(waited) from the host, which answers for its services within \(Self.describe(hostTimeout)): the host or the network did not answer, not the service"
        }
        return
            "\(waited): the service may still be working; the host waits \(Self.describe(hostTimeout)) before it answers for the service itself (wait longer than that to hear which)"
    }

    /// How long calls wait by default: 5 s more than the response timeout the host's `welcome`
    /// tells (35 s when it tells none), and at most 10 min 5 s whatever a host says, so that no
    /// host can make a client wait for ever.
    static func answerTimeout(hostSays hostTimeout: Duration?) -> Duration {
        min(hostTimeout ?? .seconds(30), .seconds(600)) + .seconds(5)
    }

    /// A duration in words for a message: `10 s`, `0.5 s`.
    package static func describe(_ duration: Duration) -> String {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        return seconds == seconds.rounded() ? "\(Int(seconds)) s" : "\(seconds) s"
    }

    /// Ends the wait for `key` with `error`, if it is still waiting.
    func fail(_ key: WaitKey, _ error: any Error) {
        let waiter = state.withLock { $0.waiters.removeValue(forKey: key) }
        waiter?.timer?.cancel()
        waiter?.continuation.resume(throwing: error)
    }

    /// Hands an answer to whoever waits for it; false when no one does.
    func deliver(_ frame: HostFrame, to key: WaitKey) -> Bool {
        guard let waiter = state.withLock({ $0.waiters.removeValue(forKey: key) }) else { return false }
        waiter.timer?.cancel()
        waiter.continuation.resume(returning: frame)
        return true
    }

    /// Sends a frame that has no answer.
    func send(_ frame: ClientFrame) async throws {
        if let ended = state.withLock({ $0.ended }) { throw ended }
        do {
            try await channel.writeAndFlush(frame)
        } catch {
            throw AtriumClientError(.hostWentAway, "could not send \(frame.type): \(error)")
        }
    }

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

    /// Closes the connection; every channel on it ends, and calls in progress fail.
    public func close() async {
        try? await channel.close()
    }

    // MARK: - Events from the handler (on the event loop)

    func received(_ frame: HostFrame) {
        switch frame {
        case .opened(let opened):
            _ = deliver(frame, to: .opened(opened.channel))
        case .response(let response):
            _ = deliver(frame, to: .response(response.channel, response.id))
        case .pong(let id):
            _ = deliver(frame, to: .pong(id))
        case .apps(let apps):
            _ = deliver(frame, to: .apps(apps.id))
        case .launched(let launched):
            _ = deliver(frame, to: .launched(launched.id))
        case .request(let request):
            let events = state.withLock { $0.channels[request.channel] }
            guard let events else {
                answerRefused(request, "channel \(request.channel) is not open on this client")
                return
            }
            do {
                let message = try request.message.decode()
                events.requests.yield(
                    AppServiceRequest(message: message, channel: request.channel, id: request.id, connection: self))
            } catch {
                answerRefused(request, "\(error)")
            }
        case .closed(let closed):
            let events = state.withLock { $0.channels.removeValue(forKey: closed.channel) }
            events?.closed.yield(closed.status)
            events?.closed.finish()
            events?.requests.finish()
        case .paired(let paired):
            if !deliver(frame, to: .paired(paired.id)) {
                state.withLock { state in
                    if state.unclaimedPaired.count >= 8 { state.unclaimedPaired.removeAll() }
                    state.unclaimedPaired[paired.id] = paired
                }
            }
        case .pairNonce(let id, _):
            _ = deliver(frame, to: .paired(id))
        case .adminResult(let result):
            _ = deliver(frame, to: .admin(result.id))
        case .error(let error):
            let refused = state.withLock { state -> [WaitKey] in
                state.lastError = error
                // The host answers an unpaired device's `apps` with this error (CONTRACT 7).
                guard error.code == .notAuthorized else { return [] }
                return state.waiters.keys.filter { if case .apps = $0 { true } else { false } }
            }
            for key in refused {
                fail(key, AtriumClientError(.notAuthorized, "the host refused: \(error.message)"))
            }
        case .welcome, .unknown:
            break
        }
    }

    private func answerRefused(_ request: RequestFrame, _ reason: String) {
        channel.writeAndFlush(
            ClientFrame.response(
                ResponseFrame(channel: request.channel, id: request.id, status: .failure, error: reason)),
            promise: nil
        )
    }

    func ended() {
        let (waiters, channels, error) = state.withLock { state in
            let reason =
                state.lastError.map {
                    AtriumClientError(.hostWentAway, "the host closed the connection: \($0.code): \($0.message)")
                }
                ?? AtriumClientError(.hostWentAway, "the host closed the connection")
            state.ended = reason
            defer {
                state.waiters.removeAll()
                state.channels.removeAll()
            }
            return (state.waiters, state.channels, reason)
        }
        for (_, waiter) in waiters {
            waiter.timer?.cancel()
            waiter.continuation.resume(throwing: error)
        }
        for (_, events) in channels {
            events.closed.yield(.unknown)
            events.closed.finish()
            events.requests.finish()
        }
    }
}

/// The pipeline end of a client connection: the handshake first, then every frame goes to the
/// ``AtriumConnection``.
final class ClientFrameHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HostFrame

    private let lock = NSLock()
    private var connection: AtriumConnection?
    private var handshake: CheckedContinuation<WelcomeFrame, any Error>?
    private var early: [HostFrame] = []
    /// The TLS handshake's check of the host's certificate, when TLS is spoken.
    let check: PeerCertificateCheck?
    let endpoint: AtriumEndpoint

    init(check: PeerCertificateCheck?, endpoint: AtriumEndpoint) {
        self.check = check
        self.endpoint = endpoint
    }

    func handshake(on channel: any Channel, hello: HelloFrame, timeout: Duration) async throws -> WelcomeFrame {
        try await withCheckedThrowingContinuation { continuation in
            // The connection may have failed already (a TLS handshake runs as soon as it is
            // connected): then that is the answer.
            let failed = lock.withLock { () -> (any Error)? in
                if let failure = earlyFailure { return failure }
                handshake = continuation
                return nil
            }
            if let failed {
                continuation.resume(throwing: failed)
                return
            }
            channel.eventLoop.scheduleTask(in: .init(timeout)) {
                self.finishHandshake(
                    .failure(AtriumClientError(.timedOut, "the host did not answer hello within \(timeout)")))
            }
            channel.writeAndFlush(ClientFrame.hello(hello), promise: nil)
        }
    }

    private func finishHandshake(_ result: Result<WelcomeFrame, any Error>) {
        let waiting = lock.withLock { () -> CheckedContinuation<WelcomeFrame, any Error>? in
            defer { handshake = nil }
            if handshake == nil, connection == nil, earlyFailure == nil, case .failure(let error) = result {
                earlyFailure = error
            }
            return handshake
        }
        waiting?.resume(with: result)
    }

    /// The first failure before `hello` was sent (kept for the handshake to answer with).
    private var earlyFailure: (any Error)?

    func attach(_ connection: AtriumConnection) {
        let pending = lock.withLock { () -> [HostFrame] in
            self.connection = connection
            defer { early.removeAll() }
            return early
        }
        for frame in pending { connection.received(frame) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        if case .welcome(let welcome) = frame {
            finishHandshake(.success(welcome))
            return
        }
        // An error before `welcome` is the host's refusal, also when it came before `hello`
        // was even sent (a host that refuses at once, say, a local user it does not serve).
        if case .error(let error) = frame, lock.withLock({ connection == nil }) {
            finishHandshake(
                .failure(
                    AtriumClientError(
                        .protocolError, "the host refused the connection: \(error.code): \(error.message)")))
            return
        }
        let target = lock.withLock { () -> AtriumConnection? in
            if connection == nil { early.append(frame) }
            return connection
        }
        target?.received(frame)
    }

    func channelInactive(context: ChannelHandlerContext) {
        finishHandshake(
            .failure(AtriumClientError(.hostWentAway, "the host closed the connection during the handshake")))
        lock.withLock { connection }?.ended()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let check, let mismatch = check.mismatch, let expected = check.expected {
            finishHandshake(
                .failure(
                    AtriumClientError(
                        .hostIdentityChanged,
                        "\(endpoint) is not the host you know: it presented the identity \(mismatch), but was known as \(expected). If the host made a new key on purpose, pair again and forget the old one (atrium pair HOST --forget); otherwise someone may be in between"
                    )))
        } else if check != nil, error is NIOSSLError || error is BoringSSLError {
            finishHandshake(
                .failure(
                    AtriumClientError(
                        .cannotConnect,
                        "the TLS handshake with \(endpoint) failed: \(error). Does the host speak TLS there (atriumd --tls), or does it take plain TCP only (atrium --insecure, on loopback)?"
                    )))
        }
        context.close(promise: nil)
    }
}
