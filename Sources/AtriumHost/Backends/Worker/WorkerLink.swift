import AtriumProtocol
import NIOCore

/// One socket between the host and a worker, as either side writes to it. Frames written on
/// the channel's own event loop go out together, with one flush per turn of the loop: a burst
/// of requests (or of answers) costs one write, not one each. Frames from other threads are
/// flushed at once.
final class WorkerLink: @unchecked Sendable {
    let channel: any Channel
    /// Whether a flush is due at the end of this turn of the loop. Touched only on the
    /// channel's event loop (checked before every use), hence the unchecked Sendable.
    private var flushScheduled = false

    init(_ channel: any Channel) {
        self.channel = channel
    }

    func send(_ frame: WorkerFrame) {
        guard channel.eventLoop.inEventLoop else {
            channel.writeAndFlush(frame, promise: nil)
            return
        }
        channel.write(frame, promise: nil)
        guard !flushScheduled else { return }
        flushScheduled = true
        channel.eventLoop.execute {
            self.flushScheduled = false
            self.channel.flush()
        }
    }
}
