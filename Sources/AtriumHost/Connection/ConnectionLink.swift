import NIOCore
import Synchronization

/// A way to reach a connection from any thread: work is run on its event loop.
struct ConnectionLink: Sendable {
    let id: UInt64
    let handler: NIOLoopBound<ConnectionHandler>
    /// The connection's channels and requests, which backends reach from their threads.
    let slot: ConnectionSlot
    /// Whether the connection's unsent output is over its high-water mark, readable from any
    /// thread: a backend's messages to a client that is not reading are refused (busy).
    let output: OutputGauge

    var eventLoop: any EventLoop { handler.eventLoop }

    /// Runs `body` with the connection's handler on its event loop (at once when already there).
    func run(_ body: @escaping @Sendable (ConnectionHandler) -> Void) {
        let handler = self.handler
        if eventLoop.inEventLoop {
            body(handler.value)
        } else {
            eventLoop.execute { body(handler.value) }
        }
    }
}

/// Whether a connection's unsent output is over its high-water mark.
final class OutputGauge: Sendable {
    private let blocked = Atomic<Bool>(false)

    var isBlocked: Bool {
        get { blocked.load(ordering: .relaxed) }
        set { blocked.store(newValue, ordering: .relaxed) }
    }
}
