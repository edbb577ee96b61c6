import Dispatch
import Testing

@testable import AtriumHost

/// The worker's supervision as plain state, driven with a clock of the test's own: what a
/// crash, a crash loop, a failed first start and a stop lead to.
struct WorkerSupervisorTests {
    let start = ContinuousClock.now

    /// A supervisor whose worker is running (a restart's start, waited for by nobody).
    func running() -> WorkerSupervisor {
        var supervisor = WorkerSupervisor()
        let started = supervisor.starting()
        #expect(started)
        guard case .started(let waiter) = supervisor.loaded(failure: nil) else {
            Issue.record("a starting worker's ready was not taken")
            return supervisor
        }
        #expect(waiter == nil)
        return supervisor
    }

    @Test func crashesRestartAfterADoublingDelayAndTheFifthInAMinuteGivesUp() {
        var supervisor = running()
        var delays: [Duration] = []
        for crash in 0..<4 {
            let now = start + .seconds(crash)
            guard case .restart(let delay) = supervisor.workerEnded("was killed by SIGSEGV", at: now) else {
                Issue.record("crash \(crash + 1) did not restart the worker")
                return
            }
            delays.append(delay)
            #expect(supervisor.health(pid: nil, at: now).state == .restarting)
            #expect(supervisor.health(pid: nil, at: now).reason?.contains("was killed by SIGSEGV") == true)
            let started = supervisor.starting()
            #expect(started)
            _ = supervisor.loaded(failure: nil)
        }
        #expect(delays == [.milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2)])
        guard case .giveUp(let reason) = supervisor.workerEnded("exited with status 1", at: start + .seconds(4)) else {
            Issue.record("the fifth crash within a minute did not give the package up")
            return
        }
        #expect(reason.contains("5 times within 60 seconds"), "\(reason)")
        let health = supervisor.health(pid: nil, at: start + .seconds(4))
        #expect(health.state == .failed && health.recentCrashes == 5)
        // Given up: a later end changes nothing.
        guard case .nothing = supervisor.workerEnded("exited with status 1", at: start + .seconds(5)) else {
            Issue.record("an end after giving up was acted on")
            return
        }
    }

    @Test func crashesAMinuteApartAreEachAFirst() {
        var supervisor = running()
        for crash in 0..<8 {
            let now = start + .seconds(61 * crash)
            #expect(supervisor.backtraces(at: now), "no crash in the minute before: backtraces on")
            guard case .restart(let delay) = supervisor.workerEnded("was killed by SIGABRT", at: now) else {
                Issue.record("crash \(crash + 1), a minute after the last, did not restart")
                return
            }
            #expect(delay == .milliseconds(250))
            #expect(!supervisor.backtraces(at: now + .seconds(1)), "a crash in the last minute: backtraces off")
            let started = supervisor.starting()
            #expect(started)
            _ = supervisor.loaded(failure: nil)
        }
    }

    @Test func aFirstStartThatEndsOrFailsWakesItsWaiterWithTheReason() {
        var ended = WorkerSupervisor()
        let waiter = DispatchSemaphore(value: 0)
        ended.awaitFirstStart(waiter)
        let started = ended.starting()
        #expect(started)
        #expect(!ended.isStartingUnwaited)
        guard case .startFailed(let woken) = ended.workerEnded("exited with status 3", at: start) else {
            Issue.record("a worker that died while loading did not fail its first start")
            return
        }
        #expect(woken === waiter)
        #expect(ended.startError == "the worker process exited with status 3 while loading the plugin")
        #expect(ended.health(pid: nil, at: start).state == .failed)

        var refused = WorkerSupervisor()
        refused.awaitFirstStart(DispatchSemaphore(value: 0))
        let startedAgain = refused.starting()
        #expect(startedAgain)
        guard case .started(let first?) = refused.loaded(failure: "atrium_plugin_create returned 3") else {
            Issue.record("a ready with an error did not end the first start")
            return
        }
        _ = first
        #expect(refused.startError == "atrium_plugin_create returned 3")
        #expect(refused.health(pid: nil, at: start).reason == "atrium_plugin_create returned 3")
        // A second ready is not a start.
        guard case .unexpected = refused.loaded(failure: nil) else {
            Issue.record("a second ready was taken as a start")
            return
        }
    }

    @Test func aStoppedPackageStartsNoWorkerAndItsEndIsNoCrash() {
        var supervisor = running()
        supervisor.shutDown()
        guard case .nothing = supervisor.workerEnded("was killed by SIGTERM", at: start) else {
            Issue.record("the end of a stopped package's worker was taken as a crash")
            return
        }
        let started = supervisor.starting()
        #expect(!started, "a stopped package started a worker")
        #expect(supervisor.health(pid: nil, at: start).recentCrashes == 0)
    }
}
