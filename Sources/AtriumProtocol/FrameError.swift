/// A frame that breaks the protocol. The host answers it with an `error` frame carrying
/// ``code`` and ``message``, and (unless ``closesConnection`` is false) closes the connection.
public struct FrameError: Error, Sendable, Hashable, CustomStringConvertible {
    public var code: ProtocolErrorCode
    /// What was wrong, naming the frame type and key where there is one.
    public var message: String

    public init(_ code: ProtocolErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The stream ended `bytes` bytes into a frame not yet whole.
    public static func truncated(after bytes: Int) -> FrameError {
        FrameError(.truncatedFrame, "the connection ended \(bytes) bytes into an incomplete frame")
    }

    /// Whether the connection must be closed after this error (all but `unknownType`).
    public var closesConnection: Bool { code != .unknownType }

    public var description: String { "\(code): \(message)" }
}

/// The `code` of an `error` frame.
public struct ProtocolErrorCode: RawRepresentable, Sendable, Hashable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }
    public var description: String { rawValue }

    /// A frame whose `type` the receiver does not know; the connection stays open.
    public static let unknownType: Self = "unknownType"
    /// Not well-formed CBOR, not a map, a missing or mistyped key.
    public static let malformedFrame: Self = "malformedFrame"
    /// A length over the receiver's hard frame limit.
    public static let frameTooLarge: Self = "frameTooLarge"
    /// The connection ended in the middle of a frame.
    public static let truncatedFrame: Self = "truncatedFrame"
    /// A frame other than `hello` came first.
    public static let helloRequired: Self = "helloRequired"
    /// A `hello` with a protocol version the host does not speak.
    public static let unsupportedVersion: Self = "unsupportedVersion"
    /// A second `hello` on the same connection.
    public static let duplicateHello: Self = "duplicateHello"
    /// The host refused the client (bad or missing token).
    public static let notAuthorized: Self = "notAuthorized"
    /// The host is shutting down.
    public static let shuttingDown: Self = "shuttingDown"
    /// The host has as many connections as it takes, in all or from the client's address.
    public static let tooManyConnections: Self = "tooManyConnections"
    /// The client did not send `hello` in time, or sent no frame for the idle timeout.
    public static let timedOut: Self = "timedOut"
    /// The client spoke plain TCP to an address where the host takes only TLS.
    public static let tlsRequired: Self = "tlsRequired"
}
