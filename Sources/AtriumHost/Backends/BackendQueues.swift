import Dispatch
import NIOCore
import Synchronization

/// Where a backend in the host's process runs its calls: a serial queue of its own (so a
/// call that blocks holds up only this backend, never a network thread), and for requests
/// either that queue or, for a backend that may be called concurrently, a concurrent one.
///
/// A backend that has stopped taking its work off its queues (blocked, or slow) gets at most
/// `maxQueuedPerService` requests waiting there; the rest are answered with status 5 at once.
/// A request that was answered while it waited (by the timeout, or because its channel
/// closed) is dropped rather than delivered.
final class BackendQueues: Sendable {
    let queue: DispatchQueue
    let requestQueue: DispatchQueue
    /// Requests on ``requestQueue`` not yet handed over.
    private let queued = Atomic<Int>(0)

    /// `queue`: one to share (declared functions of one library share its serial queue); by
    /// default a new one, labelled after `package`.
    init(package: String, concurrent: Bool, sharing shared: DispatchQueue? = nil) {
        queue = shared ?? DispatchQueue(label: "atrium.plugin.\(package)")
        requestQueue =
            concurrent ? DispatchQueue(label: "atrium.plugin.\(package).requests", attributes: .concurrent) : queue
    }

    /// Runs `deliver` on the request queue, unless the backend already has the most requests
    /// waiting that it may, or the request is answered by the time its turn comes.
    func submit(
        _ request: UInt64, of backend: any ServiceBackend, host: any BackendHost,
        deliver: @escaping @Sendable () -> Void
    ) {
        let limit = host.maxQueuedPerService
        guard queued.wrappingAdd(1, ordering: .relaxed).oldValue < limit else {
            queued.wrappingSubtract(1, ordering: .relaxed)
            host.queueWasFull(backend, limit: limit)
            host.answer(
                request, status: .resourceLimitsExceeded,
                error: "the service has \(limit) requests waiting; try again later")
            return
        }
        requestQueue.async {
            self.queued.wrappingSubtract(1, ordering: .relaxed)
            guard host.isPending(request) else { return }
            deliver()
        }
    }

    /// Runs `last` once both queues are idle, waiting at most `timeout` for it to have run:
    /// a backend stuck in a call does not hold up the host's exit (false is returned, and
    /// `last` is left for the queues to reach).
    func drain(within timeout: Duration, then last: @escaping @Sendable () -> Void) -> Bool {
        let done = DispatchSemaphore(value: 0)
        requestQueue.async(flags: .barrier) {
            self.queue.async {
                last()
                done.signal()
            }
        }
        return done.wait(timeout: .now() + timeout.seconds) == .success
    }
}

extension Duration {
    /// The duration in seconds, as Dispatch's time arithmetic takes it.
    var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
