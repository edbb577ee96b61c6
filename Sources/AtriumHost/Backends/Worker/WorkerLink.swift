import AtriumProtocol
import NIOCore

/// One socket between the host and a worker, as the host writes to it. A frame is encoded
/// here and written as bytes: no frame value passes through the channel's pipeline, which
/// would box it and cast it back once per frame. Frames written on the channel's own event
/// loop go out together, with one flush per turn of the loop: a burst of requests costs one
/// write, not one each. Frames from other threads are flushed at once.
final class WorkerLink: @unchecked Sendable {
    let channel: any Channel
    /// Whether a flush is due at the end of this turn of the loop. Touched only on the
    /// channel's event loop (checked before every use), hence the unchecked Sendable.
    private var flushScheduled = false

    init(_ channel: any Channel) {
        self.channel = channel
    }

    func send(_ frame: WorkerFrame) {
        let bytes = Self.encoded(frame, allocator: channel.allocator)
        guard channel.eventLoop.inEventLoop else {
            channel.writeAndFlush(bytes, promise: nil)
            return
        }
        channel.write(bytes, promise: nil)
        guard !flushScheduled else { return }
        flushScheduled = true
        channel.eventLoop.execute {
            self.flushScheduled = false
            self.channel.flush()
        }
    }

    /// `frame` with its length prefix.
    static func encoded(_ frame: WorkerFrame, allocator: ByteBufferAllocator) -> ByteBuffer {
        var bytes = allocator.buffer(for: frame)
        bytes.writeFrame(frame)
        return bytes
    }
}
