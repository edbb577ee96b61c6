public import AtriumValues
public import NIOCore

// The frames of CONTRACT section 2. Each is a CBOR map with a text "type"; unknown keys are
// ignored when decoding, optional keys are left out when encoding.

/// `hello`: the first frame a client sends.
public struct HelloFrame: Sendable, Hashable {
    public var version: UInt64
    public var clientId: String
    public var clientName: String?
    public var token: String?

    public init(
        version: UInt64 = atriumProtocolVersion, clientId: String, clientName: String? = nil, token: String? = nil
    ) {
        self.version = version
        self.clientId = clientId
        self.clientName = clientName
        self.token = token
    }
}

/// `open`: the client opens `channel` to `service` in `package`.
public struct OpenFrame: Sendable, Hashable {
    public var channel: UInt64
    public var service: String
    public var package: String

    public init(channel: UInt64, service: String, package: String) {
        self.channel = channel
        self.service = service
        self.package = package
    }
}

/// `request`: a message on a channel, from either side, answered by one `response`.
public struct RequestFrame: Sendable, Hashable {
    public var channel: UInt64
    public var id: UInt64
    public var message: EncodedValueSet
    /// A client's `attach` (docs/PROTOCOL.md, "A download started with its request"): a
    /// download the service offers while answering is attached to this connection at once, and
    /// its `attached` comes in the response.
    public var attach: RequestAttach?

    public init(channel: UInt64, id: UInt64, message: EncodedValueSet, attach: RequestAttach? = nil) {
        self.channel = channel
        self.id = id
        self.message = message
        self.attach = attach
    }
}

/// A request's `attach`: the window of the download it starts (the bytes the host may send
/// before the client's first `ack`; 4 MiB when absent), from offset 0.
public struct RequestAttach: Sendable, Hashable {
    public var window: UInt64?

    public init(window: UInt64? = nil) {
        self.window = window
    }
}

/// `response`: the answer to the `request` with the same `channel` and `id`.
public struct ResponseFrame: Sendable, Hashable {
    public var channel: UInt64
    public var id: UInt64
    public var status: AppServiceResponseStatus
    /// The answer; empty when there is none.
    public var message: EncodedValueSet
    /// Why the status is not success, in words.
    public var error: String?
    /// The download the service offered while answering a request that asked to `attach`
    /// one, attached to this connection: the `attached` frame's keys (its `id` the request's).
    public var attached: AttachedFrame?

    public init(
        channel: UInt64,
        id: UInt64,
        status: AppServiceResponseStatus,
        message: EncodedValueSet = .empty,
        error: String? = nil,
        attached: AttachedFrame? = nil
    ) {
        self.channel = channel
        self.id = id
        self.status = status
        self.message = message
        self.error = error
        self.attached = attached
    }
}

/// `launch`: the client asks the host to launch `uri`.
public struct LaunchFrame: Sendable, Hashable {
    public var id: UInt64
    public var uri: String
    /// The app that should handle it.
    public var package: String?
    /// Launched instead when nothing handles `uri`.
    public var fallbackUri: String?
    /// Packages to prefer, in order, among those that handle the scheme.
    public var preferredPackages: [String]
    /// Data for the handler.
    public var data: EncodedValueSet?

    public init(
        id: UInt64,
        uri: String,
        package: String? = nil,
        fallbackUri: String? = nil,
        preferredPackages: [String] = [],
        data: EncodedValueSet? = nil
    ) {
        self.id = id
        self.uri = uri
        self.package = package
        self.fallbackUri = fallbackUri
        self.preferredPackages = preferredPackages
        self.data = data
    }
}

/// `welcome`: the host's answer to `hello`.
public struct WelcomeFrame: Sendable, Hashable {
    public var version: UInt64
    public var hostId: String
    public var hostName: String
    public var platform: String
    public var limits: ProtocolLimits
    /// The host's identity (CONTRACT section 7): the SHA-256 of its certificate's
    /// SubjectPublicKeyInfo, lowercase hex. Sent by a host that has one.
    public var hostIdentity: String?
    /// What kind of machine the host runs on, in systemd's chassis names (desktop, laptop,
    /// server, vm, ...; docs/DISCOVERY.md). An Atrium extension: older hosts leave it out.
    public var kind: String?
    /// How long the host waits for a service's answer before it answers itself, in
    /// milliseconds: a client that waits longer hears from the host either way. An Atrium
    /// extension: older hosts leave it out.
    public var responseTimeoutMilliseconds: UInt64?

    public init(
        version: UInt64 = atriumProtocolVersion,
        hostId: String,
        hostName: String,
        platform: String = "linux",
        limits: ProtocolLimits,
        hostIdentity: String? = nil,
        kind: String? = nil,
        responseTimeoutMilliseconds: UInt64? = nil
    ) {
        self.version = version
        self.hostId = hostId
        self.hostName = hostName
        self.platform = platform
        self.limits = limits
        self.hostIdentity = hostIdentity
        self.kind = kind
        self.responseTimeoutMilliseconds = responseTimeoutMilliseconds
    }

    /// ``responseTimeoutMilliseconds`` as a duration.
    public var hostResponseTimeout: Duration? {
        responseTimeoutMilliseconds.map { .milliseconds(Int64(clamping: $0)) }
    }
}

/// `opened`: the outcome of an `open`.
public struct OpenedFrame: Sendable, Hashable {
    public var channel: UInt64
    public var status: AppServiceConnectionStatus
    /// Why the status is not success, in words.
    public var error: String?

    public init(channel: UInt64, status: AppServiceConnectionStatus, error: String? = nil) {
        self.channel = channel
        self.status = status
        self.error = error
    }
}

/// `closed`: the service side closed the channel.
public struct ClosedFrame: Sendable, Hashable {
    public var channel: UInt64
    public var status: AppServiceClosedStatus

    public init(channel: UInt64, status: AppServiceClosedStatus) {
        self.channel = channel
        self.status = status
    }
}

/// `launched`: the outcome of a `launch`.
public struct LaunchedFrame: Sendable, Hashable {
    public var id: UInt64
    public var status: RemoteLaunchUriStatus
    public var error: String?

    public init(id: UInt64, status: RemoteLaunchUriStatus, error: String? = nil) {
        self.id = id
        self.status = status
        self.error = error
    }
}

/// One package in an `apps` answer.
public struct AppInfo: Sendable, Hashable {
    public var package: String
    public var displayName: String
    /// The services that accept remote callers.
    public var services: [String]
    public var schemes: [String]
    /// Whether the package can answer: `ready`, `starting`, `restarting` or `failed` (from
    /// hosts that say).
    public var state: String?
    /// Why the package is not ready, told to local clients only.
    public var reason: String?
    /// What its services take, by service name, for the services that declare commands: sent
    /// only in the answer to an `apps` that names the package.
    public var interfaces: [String: ServiceInterface]
    /// What its services take, encoded already: sent instead of ``interfaces`` when set (a
    /// host's, so that the same description is not encoded again for every answer).
    public var encodedInterfaces: EncodedInterfaces?

    public init(
        package: String, displayName: String, services: [String], schemes: [String], state: String? = nil,
        reason: String? = nil, interfaces: [String: ServiceInterface] = [:], encodedInterfaces: EncodedInterfaces? = nil
    ) {
        self.encodedInterfaces = encodedInterfaces
        self.package = package
        self.displayName = displayName
        self.services = services
        self.schemes = schemes
        self.state = state
        self.reason = reason
        self.interfaces = interfaces
    }
}

/// `apps`: the host's packages.
public struct AppsFrame: Sendable, Hashable {
    public var id: UInt64
    public var apps: [AppInfo]

    public init(id: UInt64, apps: [AppInfo]) {
        self.id = id
        self.apps = apps
    }
}

/// `error`: a protocol error, with a code from ``ProtocolErrorCode`` and a reason.
public struct ErrorFrame: Sendable, Hashable {
    public var code: ProtocolErrorCode
    public var message: String

    public init(code: ProtocolErrorCode, message: String) {
        self.code = code
        self.message = message
    }

    public init(_ error: FrameError) {
        self.init(code: error.code, message: error.message)
    }
}

// MARK: - The two directions

/// A frame of either direction: decodes from and encodes to a frame body (the CBOR map,
/// without the length prefix).
public protocol AtriumFrame: Sendable, Hashable {
    /// Decodes a frame body. An unknown `type` decodes (as the `unknown` case); everything
    /// else that breaks CONTRACT section 1 throws.
    init(body: ByteBuffer) throws(FrameError)
    /// Appends the frame body.
    func encode(into buffer: inout ByteBuffer)
    /// Appends the frame with its 4-byte length prefix (``ByteBuffer/writeFrame(_:)``).
    func encodeFramed(into buffer: inout ByteBuffer)
    /// The frame's `type`.
    var type: String { get }
    /// How many bytes of a message (or a launch's data) the frame carries: what its encoding
    /// needs beyond its keys. 0 unless the frame type says otherwise.
    var carriedBytes: Int { get }
}

extension AtriumFrame {
    public var carriedBytes: Int { 0 }
}

extension ByteBufferAllocator {
    /// An empty buffer with room for `frame` written with its length prefix: what it carries,
    /// and its keys (a few hundred bytes at most).
    @inlinable
    public func buffer(for frame: some AtriumFrame) -> ByteBuffer {
        buffer(capacity: 256 + frame.carriedBytes)
    }
}

/// What a client sends to a host.
/// How a pairing ended (`paired.status`).
public struct PairingStatus: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// The host's operator accepted the device (or it was paired already, or is local).
    public static let paired = PairingStatus(rawValue: 0)
    /// The host's operator refused it.
    public static let refused = PairingStatus(rawValue: 1)
    /// No one decided within the host's pairing timeout.
    public static let timedOut = PairingStatus(rawValue: 2)
    /// Pairing is not possible on this connection (plain TCP: a device is its TLS identity),
    /// or the host has too many requests waiting.
    public static let notPossible = PairingStatus(rawValue: 3)

    public var description: String {
        switch self {
        case .paired: "Paired (0)"
        case .refused: "Refused (1)"
        case .timedOut: "TimedOut (2)"
        case .notPossible: "NotPossible (3)"
        default: "Unknown (\(rawValue))"
        }
    }
}

/// `paired`: the outcome of a `pair`.
public struct PairedFrame: Sendable, Hashable {
    public var id: UInt64
    public var status: PairingStatus
    public var error: String?

    public init(id: UInt64, status: PairingStatus, error: String? = nil) {
        self.id = id
        self.status = status
        self.error = error
    }
}

/// `pair`: asks the host's operator to pair this device. With `commitment` (a client of this
/// implementation always sends one), the pairing takes two more frames before the operator
/// sees it: the host's `pairNonce`, then the client's `pairReveal` of the nonce it committed
/// to, so that the verification code covers a nonce of each side (as Bluetooth's numeric
/// comparison does) and no one in the middle can choose keys that make the two codes match.
public struct PairFrame: Sendable, Hashable {
    public var id: UInt64
    public var deviceName: String
    /// SHA-256 of `atrium-pairing-commit-v1`, a NUL and the client's nonce, lowercase hex.
    public var commitment: String?

    public init(id: UInt64, deviceName: String, commitment: String? = nil) {
        self.id = id
        self.deviceName = deviceName
        self.commitment = commitment
    }
}

/// `admin`: an operator's command, taken on the local socket only (`atrium pairing`,
/// `atrium devices`). Its arguments and result are ValueSets.
public struct AdminFrame: Sendable, Hashable {
    public var id: UInt64
    public var command: String
    public var arguments: EncodedValueSet?

    public init(id: UInt64, command: String, arguments: EncodedValueSet? = nil) {
        self.id = id
        self.command = command
        self.arguments = arguments
    }
}

/// `adminResult`: the answer to an `admin` command: status 0 and a result, or status 1 and
/// the reason.
public struct AdminResultFrame: Sendable, Hashable {
    public var id: UInt64
    public var status: UInt64
    public var result: EncodedValueSet?
    public var error: String?

    public init(id: UInt64, status: UInt64, result: EncodedValueSet? = nil, error: String? = nil) {
        self.id = id
        self.status = status
        self.result = result
        self.error = error
    }
}

public enum ClientFrame: AtriumFrame {
    case hello(HelloFrame)
    case open(OpenFrame)
    case request(RequestFrame)
    case response(ResponseFrame)
    case close(channel: UInt64)
    case launch(LaunchFrame)
    /// With a `package`: that package alone, with its services' interfaces.
    case apps(id: UInt64, package: String? = nil)
    case ping(id: UInt64)
    /// Asks the host's operator to pair this device (CONTRACT section 7).
    case pair(PairFrame)
    /// The nonce the client committed to in `pair` (32 bytes, lowercase hex).
    case pairReveal(id: UInt64, nonce: String)
    case admin(AdminFrame)
    /// A frame of transfers (CONTRACT section 8).
    case transfer(ClientTransferFrame)
    /// A frame whose `type` this version does not know (answered with `unknownType`).
    case unknown(type: String)
}

/// What a host sends to a client.
public enum HostFrame: AtriumFrame {
    case welcome(WelcomeFrame)
    case opened(OpenedFrame)
    case response(ResponseFrame)
    case request(RequestFrame)
    case closed(ClosedFrame)
    case launched(LaunchedFrame)
    case apps(AppsFrame)
    case pong(id: UInt64)
    case paired(PairedFrame)
    /// The host's nonce for a committed `pair` (32 bytes, lowercase hex).
    case pairNonce(id: UInt64, nonce: String)
    case adminResult(AdminResultFrame)
    /// A frame of transfers (CONTRACT section 8).
    case transfer(HostTransferFrame)
    case error(ErrorFrame)
    /// A frame whose `type` this version does not know.
    case unknown(type: String)
}
