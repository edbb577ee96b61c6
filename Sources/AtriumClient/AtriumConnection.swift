public import AtriumProtocol
import AtriumTLS
import AtriumValues
import Foundation
public import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

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
        case attached(UInt64)
        case transfers(UInt64)
        case canceled(UUID)
        case link(UInt64)
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
        /// Where the frames of each transfer this client has attached go.
        var transfers: [UUID: AsyncStream<TransferEvent>.Continuation] = [:]
        /// Downloads attached with the request that started them (``AppServiceConnection``
        /// `sendMessage(_:startingDownload:timeout:)`), until ``attachTransfer(_:offset:window:timeout:)``
        /// takes them up.
        var startedDownloads: [UUID: StartedDownload] = [:]
        /// The requests waiting for a response that asked the host to start a download: only
        /// their responses' `attached` is taken.
        var startingRequests: Set<WaitKey> = []
    }

    /// A download its request started, not yet taken up: its `attached`, its frames so far,
    /// and the bytes they hold (at most its window and a chunk: a host that sends more loses
    /// the start, and the operation attaches as usual).
    struct StartedDownload {
        var attached: AttachedFrame
        var events: AsyncStream<TransferEvent>
        var buffered = 0
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
            if tlsContext == nil {
                // Plain TCP: reads that can hold a transfer's whole chunk (256 KiB) at once, as
                // they grow (TLS's records come 16 KiB at a time whatever the read).
                bootstrap = bootstrap.channelOption(
                    .recvAllocator,
                    value: AdaptiveRecvByteBufferAllocator(minimum: 1024, initial: 4096, maximum: 1 << 20))
            }
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

    /// Closes the connection; every channel on it ends, and calls in progress fail.
    public func close() async {
        try? await channel.close()
    }
}
