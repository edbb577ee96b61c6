import Testing

@testable import AtriumHost

/// What a connection leaves in its slot when it goes.
struct ConnectionSlotTests {
    @Test func aConnectionThatGoesLeavesNothingButTheSequence() {
        let slot = ConnectionSlot(index: 3)
        slot.book.withLock { book in
            book.clientId = "a phone whose id is longer than a small string"
            book.isRemote = false
            // What a connection that once had many channels and requests leaves in the tables
            // once they are empty again: their storage.
            book.channels.reserveCapacity(256)
            book.numbers.reserveCapacity(256)
            book.pending.reserveCapacity(256)
            book.outgoing.reserveCapacity(256)
            _ = book.makeId()
        }
        let next = slot.book.withLock { book -> UInt64 in
            #expect(book.holdsAnything)
            book.letGo()
            #expect(!book.holdsAnything)
            #expect(book.clientId.isEmpty)
            // Remote until a connection says otherwise: the side that is trusted less.
            #expect(book.isRemote)
            #expect(book.channels.capacity == 0)
            #expect(book.numbers.capacity == 0)
            #expect(book.pending.capacity == 0)
            #expect(book.outgoing.capacity == 0)
            return book.makeId()
        }
        // The sequence goes on: the next connection's ids are not the last one's.
        #expect(ConnectionSlot.index(of: next) == 3)
        #expect(next & ((1 << ConnectionSlot.sequenceBits) - 1) == 2)
    }
}
