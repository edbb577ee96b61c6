import Foundation

/// What the tests run under.
public enum TestEnvironment {
    /// Whether the suite runs built with AddressSanitizer (Scripts/test-asan.sh says so with
    /// ATRIUM_SANITIZER=address): resident memory and address-space limits then mean nothing,
    /// and the few tests that measure them are left out.
    public static var addressSanitizer: Bool {
        ProcessInfo.processInfo.environment["ATRIUM_SANITIZER"] == "address"
    }
}

/// How many of the host's intervals for lines of one kind (10 s: refusals, breaches and their
/// counts are logged at most once each) the time since `start` reaches into: at most that
/// many such lines are logged meanwhile, however slowly a loaded machine went.
public func logIntervals(since start: ContinuousClock.Instant) -> Int {
    Int((ContinuousClock.now - start) / .seconds(10)) + 1
}

/// Whether `condition` holds within `timeout`, asked every `interval` and once more when the
/// time is up. The last ask matters: a test's task can wake long after the time it asked
/// for, when other tests hold every thread the tests' tasks share (two on a two-core
/// machine), and what happened meanwhile still counts.
public func eventually(
    within timeout: Duration, every interval: Duration = .milliseconds(20),
    _ condition: () async throws -> Bool
) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        // A cancelled task asks once more, and waits no longer.
        do { try await Task.sleep(for: interval) } catch { break }
    }
    return try await condition()
}
