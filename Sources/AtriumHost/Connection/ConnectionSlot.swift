import AtriumProtocol
import AtriumTransfers
import AtriumValues
import NIOCore
import Synchronization

/// The part of one connection's state that backends reach from their own threads: its open
/// channels, the client's requests a backend has not answered, and the backends' messages
/// the client has not answered. Everything else about the connection (its phase, opens under
/// way, budgets) is loop-confined, in ``ConnectionStateMachine``.
///
/// A backend names channels and requests by ids, and answers from any thread; the C ABI
/// tells it at once whether an answer was taken (ATRIUM_E_UNKNOWN_REQUEST). So these tables
/// sit behind a lock, and the lock is the connection's own: every id the slot hands out
/// carries the slot's index in its top bits, so finding the tables an id belongs to is an
/// array index, and no two connections ever wait for each other.
///
/// The host makes its slots up front, one per connection it may hold, and hands them out as
/// connections are admitted. A slot's sequence is never reset: ids an earlier connection in
/// the slot handed out never name anything of a later one.
///
/// Exactly-once answers rest on one rule: a request is answered by whoever removes it from
/// ``Book/pending`` (the backend's answer, the timeout, the channel closing, shutdown), and
/// removal happens under this lock.
final class ConnectionSlot: Sendable {
    /// The slot's place in the host's table.
    let index: UInt32
    let book: Mutex<Book>

    /// How many bits of an id are the slot's own sequence; the rest is the slot's index.
    static let sequenceBits: UInt64 = 40

    init(index: UInt32) {
        self.index = index
        book = Mutex(Book(prefix: UInt64(index) << Self.sequenceBits))
    }

    /// The index of the slot that handed out `id`.
    static func index(of id: UInt64) -> Int { Int(truncatingIfNeeded: id >> sequenceBits) }

    struct Book {
        /// The connection in the slot, from when it is up until it closes.
        var link: ConnectionLink?
        /// The client's identity, from its `hello`: what a backend acts on behalf of.
        var clientId = ""
        /// Whether the client is remote (over TCP); true until a connection says otherwise.
        var isRemote = true
        /// Whom the transfers a service makes for this client belong to (CONTRACT section 8),
        /// from its `hello`.
        var owner: TransferOwner?
        let prefix: UInt64
        var sequence: UInt64 = 0
        /// Open channels, by the host's id for them. `numbers` maps the client's numbers to
        /// those ids; both change together, only in ``insertChannel(_:_:)`` and
        /// ``removeChannel(_:)``.
        var channels: [UInt64: Channel] = [:]
        var numbers: [UInt64: UInt64] = [:]
        var pending: [UInt64: PendingRequest] = [:]
        var outgoing: [UInt64: OutgoingRequest] = [:]

        init(prefix: UInt64) {
            self.prefix = prefix
        }

        /// A fresh id for a channel or a request of this connection (never 0, which the C ABI
        /// reads as "no channel").
        mutating func makeId() -> UInt64 {
            sequence = sequence &+ 1
            return prefix | (sequence & (1 << ConnectionSlot.sequenceBits - 1))
        }

        mutating func insertChannel(_ handle: UInt64, _ channel: Channel) {
            channels[handle] = channel
            numbers[channel.number] = handle
        }

        /// Removes a channel and everything waiting on it: the client's requests a backend
        /// has not answered, and the backend's messages the client has not answered.
        mutating func removeChannel(_ handle: UInt64) -> ClosedChannel? {
            guard let channel = channels.removeValue(forKey: handle) else { return nil }
            if numbers[channel.number] == handle { numbers.removeValue(forKey: channel.number) }
            var closed = ClosedChannel(handle: handle, channel: channel)
            for id in pending.compactMap({ $0.value.channel == handle ? $0.key : nil }) {
                closed.pending.append((id, pending.removeValue(forKey: id)!))
            }
            for id in outgoing.compactMap({ $0.value.channel == handle ? $0.key : nil }) {
                closed.outgoing.append((id, outgoing.removeValue(forKey: id)!))
            }
            return closed
        }

        /// Lets go of what the connection that leaves the slot put in it: its link, its
        /// client's identity, and the storage of the tables it filled (removing their entries
        /// keeps it, so a connection that once had many channels would hold it in the slot for
        /// good). Called once every channel is removed, which takes each request waiting on it
        /// along: the tables are empty by then. The sequence stays, so ids go on never
        /// repeating.
        mutating func letGo() {
            assert(
                channels.isEmpty && numbers.isEmpty && pending.isEmpty && outgoing.isEmpty,
                "a connection's slot let go of with entries still in its tables")
            link = nil
            clientId = ""
            isRemote = true
            owner = nil
            channels = [:]
            numbers = [:]
            pending = [:]
            outgoing = [:]
        }

        /// Whether the slot holds anything of a connection: its link, a client's identity, or
        /// storage for its tables. Only the slots of connections still open should.
        var holdsAnything: Bool {
            link != nil || !clientId.isEmpty || owner != nil || channels.capacity > 0 || numbers.capacity > 0
                || pending.capacity > 0 || outgoing.capacity > 0
        }

        /// The channel `handle` when it is `backend`'s and not closing.
        func channel(_ handle: UInt64, of backend: any ServiceBackend) -> Channel? {
            guard let channel = channels[handle], channel.backend === backend, !channel.closing else { return nil }
            return channel
        }

        /// Takes out the client's requests and the backends' messages whose deadline is `now`
        /// or past (whoever takes them answers them), and says when the next of those left is
        /// due. The connection's timer calls it when it fires: one timer a connection, set for
        /// the earliest deadline, rather than one made and cancelled for every request.
        mutating func takeOverdue(at now: NIODeadline) -> Overdue {
            var overdue = Overdue()
            for (id, request) in pending {
                if request.deadline <= now {
                    overdue.requests.append((id, request))
                } else {
                    overdue.next = min(overdue.next ?? request.deadline, request.deadline)
                }
            }
            for (id, _) in overdue.requests { pending.removeValue(forKey: id) }
            for (id, message) in outgoing {
                if message.deadline <= now {
                    overdue.messages.append((id, message))
                } else {
                    overdue.next = min(overdue.next ?? message.deadline, message.deadline)
                }
            }
            for (id, _) in overdue.messages { _ = takeOutgoing(id) }
            return overdue
        }

        /// Removes a backend's message that waits for the client's answer and counts it off
        /// its channel.
        mutating func takeOutgoing(_ id: UInt64) -> OutgoingRequest? {
            guard let request = outgoing.removeValue(forKey: id) else { return nil }
            channels[request.channel]?.unanswered -= 1
            return request
        }
    }

    /// An open channel.
    struct Channel {
        /// The client's number for it.
        var number: UInt64
        var backend: any ServiceBackend
        /// The service the client opened: the one whose transfers the channel's requests make.
        var service: String
        /// Where its service's requests are counted on the connection's loop (with `--metrics`).
        var metricsIndex: Int?
        /// What its service declares it takes: each request is checked against it first.
        var interface: ServiceInterface?
        /// The backend's messages on it that the client has not answered yet.
        var unanswered = 0
        /// The backend asked to close it: it takes nothing more, and closes on the
        /// connection's loop.
        var closing = false
    }

    /// A client's request handed to a backend.
    struct PendingRequest {
        /// The client's channel number and request id.
        var number: UInt64
        var clientRequest: UInt64
        /// The host's id for the channel.
        var channel: UInt64
        var backend: any ServiceBackend
        /// The size of the request's message, counted against the connection's budget.
        var messageBytes: Int
        /// When the client is answered on the backend's behalf (the response timeout after
        /// the request arrived); the connection's one timer sees to it (``Book/takeOverdue(at:)``).
        var deadline: NIODeadline
        /// Where its service's requests are counted, and when it came in (with `--metrics`).
        var metricsIndex: Int? = nil
        var received = NIODeadline.uptimeNanoseconds(0)
        /// The client asked for the download the service offers while answering to be
        /// attached at once (the request's `attach`).
        var attach: RequestAttach? = nil
        /// The first download the service offered while answering, when `attach` asked for it.
        var offered: TransferID? = nil
    }

    /// A backend's message to the client, waiting for the client's answer.
    struct OutgoingRequest {
        var channel: UInt64
        var backend: any ServiceBackend
        /// When the backend is answered on the client's behalf (the response timeout after
        /// the message was taken).
        var deadline: NIODeadline
    }

    /// What ``Book/takeOverdue(at:)`` took out, and when the next deadline left is.
    struct Overdue {
        var requests: [(UInt64, PendingRequest)] = []
        var messages: [(UInt64, OutgoingRequest)] = []
        var next: NIODeadline?
    }

    /// A channel taken out of the book, with what was waiting on it.
    struct ClosedChannel {
        var handle: UInt64
        var channel: Channel
        var pending: [(UInt64, PendingRequest)] = []
        var outgoing: [(UInt64, OutgoingRequest)] = []
    }

    /// The connection's link, if `id` is one of the requests it waits on and is `backend`'s:
    /// the request is taken (whoever takes it answers it).
    func takePending(_ id: UInt64, of backend: (any ServiceBackend)? = nil) -> (PendingRequest, ConnectionLink)? {
        book.withLock { book -> (PendingRequest, ConnectionLink)? in
            guard let request = book.pending[id], backend == nil || request.backend === backend,
                let link = book.link
            else { return nil }
            book.pending.removeValue(forKey: id)
            return (request, link)
        }
    }

    func isPending(_ id: UInt64) -> Bool {
        book.withLock { $0.pending[id] != nil }
    }
}
