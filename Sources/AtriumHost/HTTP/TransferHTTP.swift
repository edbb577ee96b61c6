import Logging
import NIOCore
import NIOHTTP1

/// What a connection that speaks HTTP may make the host hold (docs/SECURITY.md, "Transfers over
/// HTTPS"): each is a fixed bound, or a `--transfer-http-*` option.
enum TransferHTTP {
    /// The longest request target (414 past it).
    static let maxTargetBytes = 4096
    /// The longest header field (name and value), and all of a request's fields (431 past
    /// either).
    static let maxFieldBytes = 8192
    static let maxHeaderBytes = 16384
    /// What the parser itself buffers of a request head before it gives up (431): a head
    /// between the limits above and this is read whole, then refused.
    static let parserLimits: NIOHTTPDecoderLimitConfiguration = {
        var limits = NIOHTTPDecoderLimitConfiguration()
        limits.maxHeaderFieldSize = 64 << 10
        limits.maxHeaderListSize = 64 << 10
        limits.maxHeaderFieldCount = 128
        return limits
    }()

    /// Makes the connection of `pipeline` an HTTP one: the frames' handler leaves, and the HTTP
    /// handlers go in at `position` (after the TLS handler).
    static func install(
        in pipeline: ChannelPipeline.SynchronousOperations, at position: ChannelPipeline.SynchronousOperations.Position,
        core: HostCore, logger: Logger
    ) throws {
        if let frames = try? pipeline.handler(type: ConnectionHandler.self) { frames.leaveForHTTP(pipeline) }
        let handler = TransferHTTPHandler(core: core, logger: logger)
        // The HTTP handlers go in the order they are added, each after the last.
        try pipeline.configureHTTPServerPipeline(
            position: position, withPipeliningAssistance: true, withErrorHandling: false,
            withEncoderConfiguration: .init(), withDecoderLimitConfiguration: parserLimits)
        try pipeline.addHandler(handler)
    }
}
