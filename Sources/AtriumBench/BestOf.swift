#if canImport(Glibc)
    import Glibc
#endif

/// What the measured bodies return, added up, so that the optimiser cannot drop their work.
/// Also an input the optimiser cannot know, for a body that needs one (`sink & 1`).
nonisolated(unsafe) public var benchmarkSink: Int64 = 0

/// The micro-benchmarks' measure: the best nanoseconds per call of `body` over `rounds`
/// rounds of `iterations` calls (the best is the round least disturbed by other work on the
/// machine), after a tenth of that to warm up. Inlinable, so that each benchmark's body is
/// called as directly as if this were written in it.
///
/// With `ATRIUM_BENCH_COUNTING=1` in the environment, every body runs a thousandth as many
/// times in one round: for counting instructions under `valgrind --tool=callgrind`, which are
/// the same from run to run however busy the machine is (BENCHMARKS.md says how).
@inlinable
public func bestNanoseconds<Result: BinaryInteger>(
    iterations: Int, rounds: Int = 9, _ body: () throws -> Result
) rethrows -> Double {
    let counting = benchmarkCounting
    let iterations = counting ? max(iterations / 1000, 10) : iterations
    let rounds = counting ? 1 : rounds
    for _ in 0..<iterations / 10 { benchmarkSink &+= Int64(truncatingIfNeeded: try body()) }
    var best = Double.infinity
    let clock = ContinuousClock()
    for _ in 0..<rounds {
        let start = clock.now
        for _ in 0..<iterations { benchmarkSink &+= Int64(truncatingIfNeeded: try body()) }
        let elapsed = clock.now - start
        let nanoseconds = Double(elapsed.components.seconds) * 1e9 + Double(elapsed.components.attoseconds) / 1e9
        best = min(best, nanoseconds / Double(iterations))
    }
    return best
}

/// Whether the benchmarks run for counting instructions (`ATRIUM_BENCH_COUNTING=1`).
public let benchmarkCounting: Bool = getenv("ATRIUM_BENCH_COUNTING").map { String(cString: $0) == "1" } ?? false
