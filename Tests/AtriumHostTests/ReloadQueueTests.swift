import Dispatch
import Glibc
import Synchronization
import Testing

@testable import AtriumHost

/// Reloads asked for while one runs: a storm of folder changes and signals during a slow
/// reload makes one reload more, not one each; a stopping host starts none.
struct ReloadQueueTests {
    final class Runs: Sendable {
        let reasons = Mutex<[[String]]>([])
        /// How many reloads returned.
        let finished = Atomic<Int>(0)
        let started = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)

        /// A reload that holds the queue, the first time, until `release` is signalled.
        func queue() -> ReloadQueue {
            ReloadQueue { [self] reasons in
                let first = self.reasons.withLock { runs in
                    runs.append(reasons)
                    return runs.count == 1
                }
                if first {
                    started.signal()
                    _ = release.wait(timeout: .now() + 10)
                }
                finished.add(1, ordering: .sequentiallyConsistent)
            }
        }
    }

    @Test func requestsDuringASlowReloadJoinInOneMore() {
        let runs = Runs()
        let queue = runs.queue()
        queue.request("SIGHUP")
        #expect(runs.started.wait(timeout: .now() + 10) == .success)
        for n in 0..<200 { queue.request(n % 3 == 0 ? "the manifests folder changed" : "SIGHUP") }
        runs.release.signal()
        queue.waitForQueued()
        #expect(runs.reasons.withLock { $0 } == [["SIGHUP"], ["the manifests folder changed", "SIGHUP"]])
        // Once idle, a request runs again.
        queue.request("SIGHUP")
        queue.waitForQueued()
        #expect(runs.reasons.withLock { $0.count } == 3)
    }

    @Test func aStoppedQueueFinishesTheReloadUnderWayAndStartsNoOther() {
        let runs = Runs()
        let queue = runs.queue()
        queue.request("SIGHUP")
        #expect(runs.started.wait(timeout: .now() + 10) == .success)
        queue.request("the manifests folder changed")
        // The reload under way ends only once the queue is stopped (within 10 s).
        DispatchQueue.global().async {
            for _ in 0..<10_000 where !queue.isStopped { usleep(1000) }
            runs.release.signal()
        }
        queue.stop()
        #expect(runs.finished.load(ordering: .sequentiallyConsistent) == 1)
        #expect(runs.reasons.withLock { $0 } == [["SIGHUP"]])
        queue.request("SIGHUP")
        queue.waitForQueued()
        #expect(runs.reasons.withLock { $0 } == [["SIGHUP"]])
    }
}
