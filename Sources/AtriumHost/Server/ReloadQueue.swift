import Dispatch
import Synchronization

/// Runs the manifests' reloads one at a time, off the event loops. A reload asked for while
/// another waits to start joins it: however many signals and folder changes arrive while a
/// slow reload runs (a package whose plugin takes its whole start timeout to fail, tried
/// again each time), at most one more reload follows it, and it reads the folder as it is
/// then.
final class ReloadQueue: Sendable {
    private let queue = DispatchQueue(label: "atrium.manifests.reload")
    private let state = Mutex(State())
    private let run: @Sendable (_ reasons: [String]) -> Void

    private struct State {
        /// Why the reload waiting to start was asked for; empty when none waits.
        var waiting: [String] = []
        var stopped = false
    }

    /// `run` is called with the reasons of the requests a reload stands for, in order.
    init(run: @escaping @Sendable (_ reasons: [String]) -> Void) {
        self.run = run
    }

    /// Asks for a reload, for `reason`.
    func request(_ reason: String) {
        state.withLock { state in
            guard !state.stopped, !state.waiting.contains(reason) else { return }
            state.waiting.append(reason)
            guard state.waiting.count == 1 else { return }
            // Queued under the lock: a request that joins this one returns after it is queued.
            queue.async { [self] in
                let reasons = self.state.withLock { state -> [String] in
                    defer { state.waiting = [] }
                    return state.stopped ? [] : state.waiting
                }
                guard !reasons.isEmpty else { return }
                run(reasons)
            }
        }
    }

    /// Returns once every reload asked for before this call has run.
    func waitForQueued() {
        queue.sync {}
    }

    /// Whether ``stop()`` was called.
    var isStopped: Bool { state.withLock { $0.stopped } }

    /// No reload starts from now on; one under way finishes before this returns.
    func stop() {
        state.withLock { $0.stopped = true }
        queue.sync {}
    }
}
