import AtriumProtocol
import NIOCore

/// The host's end of a worker's link: it splits the bytes into frames and hands each to the
/// ``WorkerProcess`` (no frame value travels the pipeline, see ``WorkerLink``); a worker that
/// breaks the framing is handled as crashed. While the host's output to the worker is over its
/// high-water mark, the worker is not read (what it sends makes the host write replies).
final class WorkerLinkHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let worker: WorkerProcess
    let generation: Int
    let link: Int
    private var input: FrameInput<WorkerFrame>
    /// Whether the worker broke the framing: nothing it sends after is read as frames.
    private var broken = false

    init(worker: WorkerProcess, generation: Int, link: Int, maxFrameBytes: Int) {
        self.worker = worker
        self.generation = generation
        self.link = link
        input = FrameInput(maxFrameBytes: maxFrameBytes)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !broken else { return }
        do {
            // The answers of one read go out to each client with one flush.
            try FlushesAfterRead.collecting { () throws(FrameError) in
                try input.read(unwrapInboundIn(data)) { frame in
                    worker.received(frame, generation: generation, link: link)
                }
            }
        } catch {
            // A worker that breaks the framing is treated as crashed.
            broken = true
            worker.linkBroken(generation: generation, error: error)
            context.close(promise: nil)
        }
    }

    func read(context: ChannelHandlerContext) {
        if context.channel.isWritable { context.read() }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        let writable = context.channel.isWritable
        worker.linkWritabilityChanged(writable: writable, generation: generation, link: link)
        // Every write to the link is flushed as it is made (``WorkerLink``): nothing to flush.
        if writable { context.read() }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        worker.linkClosed(generation: generation)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
