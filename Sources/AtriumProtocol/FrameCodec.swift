public import NIOCore

/// Splits a byte stream into frames (a 4-byte big-endian length, then that many bytes of one
/// CBOR map) and decodes each into a `Frame`.
///
/// A length over `maxFrameBytes` throws ``FrameError`` (`frameTooLarge`) as soon as the four
/// length bytes have arrived, before any of the body is buffered. A body that breaks the
/// protocol throws (`malformedFrame`, naming the key). An unknown `type` is not an error here:
/// it decodes to the frame's `unknown` case, so the connection can stay open. The stream
/// ending inside a frame throws `truncatedFrame`.
///
/// Runs on its channel's event loop, as every `ByteToMessageDecoder` does.
public struct FrameDecoder<Frame: AtriumFrame>: ByteToMessageDecoder {
    public typealias InboundOut = Frame

    /// The hard limit on a frame body's length.
    public let maxFrameBytes: Int
    /// A lower limit its owner may change while frames are read (``FrameLimit``): the limit
    /// is then the smaller of the two.
    @usableFromInline
    var lowered: FrameLimit?
    /// The limit on the first frame's body (a host expects `hello` there, which is small), so
    /// that a peer that has not introduced itself cannot make the receiver buffer much.
    public let maxFirstFrameBytes: Int
    @usableFromInline
    var firstFrameSeen = false

    public init(maxFrameBytes: Int = ProtocolLimits.default.maxFrameBytes, maxFirstFrameBytes: Int? = nil) {
        self.maxFrameBytes = maxFrameBytes
        self.maxFirstFrameBytes = min(maxFirstFrameBytes ?? maxFrameBytes, maxFrameBytes)
    }

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let frame = try nextFrame(from: &buffer) else { return .needMoreData }
        context.fireChannelRead(wrapInboundOut(frame))
        return .continue
    }

    public mutating func decodeLast(
        context: ChannelHandlerContext,
        buffer: inout ByteBuffer,
        seenEOF: Bool
    ) throws -> DecodingState {
        if let frame = try nextFrame(from: &buffer) {
            context.fireChannelRead(wrapInboundOut(frame))
            return .continue
        }
        if seenEOF && buffer.readableBytes > 0 {
            let have = buffer.readableBytes
            buffer.moveReaderIndex(forwardBy: have)
            throw FrameError.truncated(after: have)
        }
        return .needMoreData
    }

    /// Takes one whole frame off the front of `buffer`, or returns `nil` (consuming nothing)
    /// when it has not all arrived. Inlinable, as the writing side is: each module that reads
    /// frames gets this specialized for its frame type, not a generic call per frame.
    @inlinable
    public func decodeFrame(from buffer: inout ByteBuffer) throws(FrameError) -> Frame? {
        try decodeFrame(from: &buffer, limit: currentLimit, first: false)
    }

    /// The limit now: ``maxFrameBytes``, or the lowered one when it is smaller.
    @inlinable
    var currentLimit: Int {
        guard let lowered else { return maxFrameBytes }
        return min(maxFrameBytes, lowered.bytes)
    }

    /// The next frame, under the first frame's limit until one has been decoded.
    @inlinable
    mutating func nextFrame(from buffer: inout ByteBuffer) throws(FrameError) -> Frame? {
        guard !firstFrameSeen else { return try decodeFrame(from: &buffer, limit: currentLimit, first: false) }
        let frame = try decodeFrame(from: &buffer, limit: maxFirstFrameBytes, first: true)
        if frame != nil { firstFrameSeen = true }
        return frame
    }

    @inlinable
    func decodeFrame(from buffer: inout ByteBuffer, limit: Int, first: Bool) throws(FrameError) -> Frame? {
        guard let length = buffer.getInteger(at: buffer.readerIndex, endianness: .big, as: UInt32.self) else {
            return nil
        }
        guard length <= limit else {
            throw FrameError(
                .frameTooLarge,
                first && limit < maxFrameBytes
                    ? "a first frame of \(length) bytes is over the limit of \(limit) bytes for hello"
                    : "a frame of \(length) bytes is over the limit of \(limit) bytes"
            )
        }
        guard buffer.readableBytes >= 4 + Int(length) else { return nil }
        buffer.moveReaderIndex(forwardBy: 4)
        let body = buffer.readSlice(length: Int(length))!
        return try Frame(body: body)
    }
}

/// Bytes read from a stream, cut into frames, for a handler that decodes its frames itself
/// (no `ByteToMessageHandler`, so no frame value boxed into the pipeline and cast back). What
/// has arrived of a frame not yet whole is kept, in a buffer of its own once a frame has been
/// taken from the read: not in the read's buffer, whose storage the frames just handed on may
/// share and keep alive. The stream ending inside a frame is the caller's to report
/// (``truncation``), and what is held the caller's to let go of (``drop()``).
///
/// The caller may stop taking frames in the middle of a read (its output is backed up, say):
/// the frames not handed on yet are held with the rest, and ``resume(_:)`` hands them on
/// later. Bytes that arrive meanwhile (the other reads of one socket wakeup) are added unread
/// (``hold(_:)``). What is held then is at most one wakeup's reads, since a caller that stops
/// taking frames stops reading too.
public struct FrameInput<Frame: AtriumFrame> {
    @usableFromInline
    var decoder: FrameDecoder<Frame>
    @usableFromInline
    var held: ByteBuffer?
    @usableFromInline
    var paused = false
    /// Whether whole frames may be held: the caller stopped taking them.
    public var isPaused: Bool { paused }

    /// `maxFirstFrameBytes`, when given, limits the first frame (as ``FrameDecoder`` does);
    /// `lowered`, when given, lowers the limit for as long as its owner says (a connection
    /// that is not authorized yet).
    public init(maxFrameBytes: Int, maxFirstFrameBytes: Int? = nil, lowered: FrameLimit? = nil) {
        decoder = FrameDecoder(maxFrameBytes: maxFrameBytes, maxFirstFrameBytes: maxFirstFrameBytes)
        decoder.lowered = lowered
    }

    /// How many bytes are held: of a frame not yet whole, and of frames not taken yet.
    public var heldBytes: Int { held?.readableBytes ?? 0 }

    /// The error for the stream ending now: `truncatedFrame` when part of a frame is held
    /// (after the whole frames held, if the caller stopped taking them).
    public var truncation: FrameError? {
        guard var rest = held, rest.readableBytes > 0 else { return nil }
        while let length = rest.getInteger(at: rest.readerIndex, endianness: .big, as: UInt32.self),
            rest.readableBytes >= 4 + Int(length)
        {
            rest.moveReaderIndex(forwardBy: 4 + Int(length))
        }
        return rest.readableBytes > 0 ? .truncated(after: rest.readableBytes) : nil
    }

    /// Lets go of what is held: the stream is done with.
    public mutating func drop() {
        held = nil
        paused = false
    }

    /// Hands each whole frame of what has arrived, `bytes` last, to `each`, in order, and
    /// keeps the rest. A length over the limit, or a body that is not a frame, throws; the
    /// frames before it have been handed on, and nothing is kept.
    @inlinable
    public mutating func read(_ bytes: ByteBuffer, _ each: (Frame) -> Void) throws(FrameError) {
        try read(bytes) { (frame: Frame) -> Bool in
            each(frame)
            return true
        }
    }

    /// Hands each whole frame of what has arrived, `bytes` last, to `each`, in order, while it
    /// answers true; once it answers false, the frames after are held (``isPaused``) until
    /// ``resume(_:)``. A length over the limit, or a body that is not a frame, throws; the
    /// frames before it have been handed on, and nothing is kept.
    @inlinable
    public mutating func read(_ bytes: ByteBuffer, _ each: (Frame) -> Bool) throws(FrameError) {
        var input = bytes
        if var earlier = held {
            held = nil
            if bytes.readableBytes > 0 {
                earlier.writeImmutableBuffer(bytes)
            }
            input = earlier
        }
        paused = false
        do {
            while let frame = try decoder.nextFrame(from: &input) {
                guard each(frame) else {
                    paused = true
                    break
                }
            }
        } catch {
            held = nil
            paused = false
            throw error
        }
        guard input.readableBytes > 0 else {
            paused = false
            return
        }
        guard input.readerIndex > 0 else {
            held = input
            return
        }
        var rest = ByteBufferAllocator().buffer(capacity: input.readableBytes)
        rest.writeImmutableBuffer(input)
        held = rest
    }

    /// Keeps `bytes` after what is held, acting on nothing, and holds the frames (``isPaused``)
    /// until ``resume(_:)``: bytes that arrive while the caller takes no frames.
    @inlinable
    public mutating func hold(_ bytes: ByteBuffer) {
        paused = true
        guard bytes.readableBytes > 0 else { return }
        if var earlier = held {
            held = nil
            earlier.writeImmutableBuffer(bytes)
            held = earlier
        } else {
            held = bytes
        }
    }

    /// Hands on the frames held since `each` (of ``read(_:_:)-(_,(Frame)->Bool)``) stopped
    /// taking them, as that does.
    @inlinable
    public mutating func resume(_ each: (Frame) -> Bool) throws(FrameError) {
        try read(ByteBuffer(), each)
    }
}

/// A frame limit that its owner may change while frames are being read (a reference, so that
/// changing it from a frame's handler does not touch the ``FrameInput`` that is reading).
/// Confined to the reading thread (the channel's event loop), as the input is.
public final class FrameLimit {
    /// The most bytes a frame body may have now.
    public var bytes: Int

    public init(bytes: Int) {
        self.bytes = bytes
    }
}

/// Writes frames: the 4-byte big-endian length, then the frame's CBOR map.
public struct FrameEncoder<Frame: AtriumFrame>: MessageToByteEncoder {
    public typealias OutboundIn = Frame

    public init() {}

    public func encode(data: Frame, out: inout ByteBuffer) {
        out.writeFrame(data)
    }
}

extension ByteBuffer {
    /// Appends `frame` with its length prefix.
    @inlinable
    public mutating func writeFrame(_ frame: some AtriumFrame) {
        frame.encodeFramed(into: &self)
    }
}
