import Testing

@testable import AtriumHost

/// The connections written to while a worker's link is read are flushed once, when the frames
/// of the read are handled, and only then.
struct FlushesAfterReadTests {
    final class Connection: FlushedLater {
        var flushes = 0
        func flushIfPending() { flushes += 1 }
    }

    struct Broken: Error {}

    @Test func writesDuringAReadAreFlushedWhenItIsHandledAndNotBefore() throws {
        let first = Connection()
        let second = Connection()
        // Outside a read: the writer flushes at once itself.
        #expect(!FlushesAfterRead.flushLater(first))
        FlushesAfterRead.collecting {
            #expect(FlushesAfterRead.flushLater(first))
            #expect(FlushesAfterRead.flushLater(second))
            // A read handled inside another's is flushed by the outer one.
            FlushesAfterRead.collecting { #expect(FlushesAfterRead.flushLater(first)) }
            #expect(first.flushes == 0 && second.flushes == 0)
        }
        #expect(first.flushes == 2 && second.flushes == 1)
        // A read whose frames break the framing still flushes what was written before.
        #expect(throws: Broken.self) {
            try FlushesAfterRead.collecting { () throws(Broken) in
                _ = FlushesAfterRead.flushLater(second)
                throw Broken()
            }
        }
        #expect(second.flushes == 2)
        #expect(!FlushesAfterRead.flushLater(first))
    }
}
