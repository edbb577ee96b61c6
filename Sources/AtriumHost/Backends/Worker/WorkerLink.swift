import AtriumProtocol
import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// One link between the host and a worker, as the host writes to it: a pipe each way (a pipe
/// costs less a round trip than a Unix socket, BENCHMARKS.md), which `channel` reads and writes
/// as one.
///
/// Frames are encoded into one buffer of the link's, on the channel's event loop, and the
/// buffer goes out once per turn of the loop (sooner once it holds 64 KiB, or while the
/// channel holds bytes): a burst of requests costs one write, not one each, and no frame is
/// boxed into the pipeline or given a buffer of its own. The write is a
/// `write` on the pipe itself while the channel holds nothing unwritten; what the pipe does
/// not take at once (the worker is not reading) is handed to the channel, which waits for the
/// pipe to take it and counts it against the high-water mark, and every later write goes
/// through the channel until it has written all it was handed, so bytes go out in the order
/// they were sent. A write that fails (the worker closed its end: `EPIPE`) closes the link,
/// which the host handles as the worker's end. Frames sent from other threads are sent from
/// the loop.
final class WorkerLink: @unchecked Sendable {
    let channel: any Channel
    // What follows is touched only on the channel's event loop (checked before every use),
    // hence the unchecked Sendable.
    /// The link's own copy of the write end of the pipe toward the worker (the channel has the
    /// other), written directly only here, on the loop, and closed here when the channel
    /// closes; -1 once closed. A copy, because the channel closes its write end by itself when
    /// the worker closes the pipe's read end (and, its reading end still open, goes on as half
    /// a link): a number closed under the link could belong to any other descriptor of the
    /// host by its next write.
    private var descriptor: Int32
    /// The descriptor the link writes to directly, -1 once the channel has closed (for tests;
    /// on the loop).
    var writtenDescriptor: Int32 { descriptor }
    /// Frames sent this turn of the loop and not written yet.
    private var output: ByteBuffer
    /// Whether a write is due at the end of this turn of the loop.
    private var flushScheduled = false
    /// Writes handed to the channel that it has not finished: while there are any, every
    /// write goes through the channel, behind them.
    private var handedToChannel = 0

    private static let initialCapacity = 4096
    /// The most the link keeps between turns of the loop, and holds in one before writing.
    private static let keptCapacity = 64 << 10

    /// A link on `channel`, writing directly to `descriptor`: a copy of the write end of the
    /// pipe toward the worker that is the link's from here (it closes it when the channel
    /// closes).
    init(_ channel: any Channel, descriptor: Int32) {
        self.channel = channel
        self.descriptor = descriptor
        output = channel.allocator.buffer(capacity: Self.initialCapacity)
        // On the channel's loop, once it has closed (at once if it has already).
        channel.closeFuture.whenComplete { _ in
            close(self.descriptor)
            self.descriptor = -1
        }
    }

    func send(_ frame: WorkerFrame) {
        guard channel.eventLoop.inEventLoop else {
            channel.eventLoop.execute { self.send(frame) }
            return
        }
        output.writeFrame(frame)
        // While the channel holds bytes (the worker is slow to read), or once a turn has sent
        // much, frames are written at once: the channel counts what it holds against its
        // high-water mark as each frame comes, and the worker is given no more work, within
        // the turn, once it is over.
        if handedToChannel > 0 || output.readableBytes >= Self.keptCapacity {
            write()
            return
        }
        guard !flushScheduled else { return }
        flushScheduled = true
        channel.eventLoop.execute {
            self.flushScheduled = false
            self.write()
        }
    }

    /// Writes what `output` holds: on the pipe while the channel holds nothing, else (and
    /// what the pipe does not take) through the channel. A write that fails closes the link.
    private func write() {
        guard output.readableBytes > 0 else { return }
        if handedToChannel == 0, descriptor >= 0, channel.isActive {
            let error = output.writeWithoutWaiting(to: descriptor)
            if error == 0 {
                // Kept for the next turn, unless a large message made it large.
                if output.capacity > Self.keptCapacity {
                    output = channel.allocator.buffer(capacity: Self.initialCapacity)
                } else {
                    output.clear()
                }
                return
            }
            guard pipeIsFull(error) else {
                output.clear()
                channel.close(promise: nil)
                return
            }
        }
        // What the pipe did not take waits in the channel for the pipe to take it.
        let rest = output
        output = channel.allocator.buffer(capacity: Self.initialCapacity)
        handedToChannel += 1
        channel.writeAndFlush(rest).whenComplete { result in
            self.handedToChannel -= 1
            if case .failure = result { self.channel.close(promise: nil) }
        }
    }
}
