/// What the measured bodies return, added up, so that the optimiser cannot drop their work.
/// Also an input the optimiser cannot know, for a body that needs one (`sink & 1`).
nonisolated(unsafe) public var benchmarkSink: Int64 = 0

/// The micro-benchmarks' measure: the best nanoseconds per call of `body` over `rounds`
/// rounds of `iterations` calls (the best is the round least disturbed by other work on the
/// machine), after a tenth of that to warm up. Inlinable, so that each benchmark's body is
/// called as directly as if this were written in it.
@inlinable
public func bestNanoseconds<Result: BinaryInteger>(
    iterations: Int, rounds: Int = 9, _ body: () throws -> Result
) rethrows -> Double {
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
