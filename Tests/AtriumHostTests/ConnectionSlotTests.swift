import AtriumValues
import NIOCore
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

    /// A backend that does nothing: the book only holds it.
    final class Idle: ServiceBackend {
        let package = "test.idle"
        func open(_ channel: ChannelInfo, completion: @escaping @Sendable (AppServiceConnectionStatus) -> Void) {}
        func request(_ request: UInt64, on channel: UInt64, message: ByteBuffer) {}
        func response(to request: UInt64, on channel: UInt64, status: AppServiceResponseStatus, message: ByteBuffer?) {}
        func closed(channel: UInt64, status: AppServiceClosedStatus, by closer: ChannelCloser) {}
        func launch(_ launch: LaunchInfo, completion: @escaping @Sendable (LaunchOutcome) -> Void) {}
        func shutDown(within timeout: Duration) -> Bool { true }
    }

    /// The connection's timer takes what is due, requests and messages alike, counts the
    /// messages off their channel, and says when the next deadline left is.
    @Test func whatIsOverdueIsTakenAndTheNextDeadlineNamed() {
        let backend = Idle()
        let slot = ConnectionSlot(index: 1)
        let at = { (milliseconds: Int64) in NIODeadline.uptimeNanoseconds(UInt64(milliseconds) * 1_000_000) }
        let overdue = slot.book.withLock { book -> ConnectionSlot.Overdue in
            book.insertChannel(10, ConnectionSlot.Channel(number: 1, backend: backend, service: "s", unanswered: 2))
            for (id, deadline) in [(1, 100), (3, 300)] as [(UInt64, Int64)] {
                book.pending[id] = ConnectionSlot.PendingRequest(
                    number: 1, clientRequest: id, channel: 10, backend: backend, messageBytes: 1, deadline: at(deadline)
                )
            }
            for (id, deadline) in [(2, 200), (4, 400)] as [(UInt64, Int64)] {
                book.outgoing[id] = ConnectionSlot.OutgoingRequest(
                    channel: 10, backend: backend, deadline: at(deadline))
            }
            return book.takeOverdue(at: at(250))
        }
        #expect(overdue.requests.map(\.0) == [1])
        #expect(overdue.messages.map(\.0) == [2])
        #expect(overdue.next == at(300))
        slot.book.withLock { book in
            #expect(Set(book.pending.keys) == [3])
            #expect(Set(book.outgoing.keys) == [4])
            #expect(book.channels[10]?.unanswered == 1, "the message taken is counted off its channel")
            // A deadline that is exactly now is due; with nothing left, there is no next one.
            let rest = book.takeOverdue(at: at(400))
            #expect(rest.requests.map(\.0) == [3] && rest.messages.map(\.0) == [4] && rest.next == nil)
            #expect(book.channels[10]?.unanswered == 0)
        }
    }
}
