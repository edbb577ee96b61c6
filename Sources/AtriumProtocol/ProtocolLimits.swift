/// The version of the wire protocol this module speaks (`hello` and `welcome` frames).
public let atriumProtocolVersion: UInt64 = 1

/// The limits a host announces in `welcome` (CONTRACT section 2) and enforces.
public struct ProtocolLimits: Sendable, Hashable {
    /// The largest request message, in encoded bytes; larger ones are answered with status 5.
    public var maxMessageBytes: Int
    /// The hard limit on a frame's length; a longer frame is a protocol error.
    public var maxFrameBytes: Int
    /// The most channels one connection may have open.
    public var maxChannels: Int
    /// The most unanswered requests one connection may have; the excess get status 2.
    public var maxInFlight: Int

    public init(maxMessageBytes: Int, maxFrameBytes: Int, maxChannels: Int, maxInFlight: Int) {
        self.maxMessageBytes = maxMessageBytes
        self.maxFrameBytes = maxFrameBytes
        self.maxChannels = maxChannels
        self.maxInFlight = maxInFlight
    }

    /// 1 MiB messages, 4 MiB frames, 64 channels, 256 requests in flight.
    public static let `default` = ProtocolLimits(
        maxMessageBytes: 1 << 20,
        maxFrameBytes: 4 << 20,
        maxChannels: 64,
        maxInFlight: 256
    )

    /// How deeply a frame's CBOR may nest before the frame is refused outright (a hard limit,
    /// like `maxFrameBytes`). Messages nested deeper than 32 levels but within this are
    /// answered with status 1, as CONTRACT section 3 says; this bound keeps the check cheap.
    public static let maxFrameNesting = 512

    /// How many keys one map of a frame may have (a hard limit). Frames have a handful; unknown
    /// keys are ignored, but a frame of thousands is refused before it costs time.
    public static let maxFrameKeys = 1024

    /// How many items an array of a frame's own (a launch's `preferredPackages`, say; not a
    /// message's) may have (a hard limit).
    public static let maxFrameArrayItems = 1024
}
