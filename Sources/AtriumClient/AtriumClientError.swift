/// Why a client call failed: what happened, and what to try.
public struct AtriumClientError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The host could not be reached (refused, no such socket, bad address).
        public static let cannotConnect = Code(rawValue: "cannotConnect")
        /// No answer within the timeout.
        public static let timedOut = Code(rawValue: "timedOut")
        /// The connection ended before the answer came.
        public static let hostWentAway = Code(rawValue: "hostWentAway")
        /// The host sent an `error` frame, or something the protocol does not allow.
        public static let protocolError = Code(rawValue: "protocolError")
        /// The channel is not open (open it first, or it was closed).
        public static let channelNotOpen = Code(rawValue: "channelNotOpen")
        /// The message could not be encoded (see the message for the key).
        public static let invalidMessage = Code(rawValue: "invalidMessage")
        /// The host is not the one expected: its TLS identity is another (see the message
        /// for both), or differs from the one it claims in `welcome`.
        public static let hostIdentityChanged = Code(rawValue: "hostIdentityChanged")
        /// The host refused the client: it is not a paired device (CONTRACT section 7).
        public static let notAuthorized = Code(rawValue: "notAuthorized")
        /// The host refused an operator's command (see the message for why).
        public static let refused = Code(rawValue: "refused")
        /// A transfer ended without completing (failed, canceled, expired; the message says
        /// which, with the host's error code), or is not this client's (`notFound`).
        public static let transferFailed = Code(rawValue: "transferFailed")
        /// A local file could not be read or written (the message names it, with the reason).
        public static let localFile = Code(rawValue: "localFile")
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
