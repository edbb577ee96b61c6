import AtriumProtocol
import NIOConcurrencyHelpers
import NIOCore

/// What ``AdmissionGate`` decided about one accepted connection: its peer (what the
/// per-address limit counts it as) and, when it may not stay, why.
final class AdmissionTicket: Sendable {
    let peer: String?
    /// The connection's slot when it may stay, else why not.
    let admission: Result<ConnectionSlot, FrameError>

    init(peer: String?, admission: Result<ConnectionSlot, FrameError>) {
        self.peer = peer
        self.admission = admission
    }
}

/// Sits in a listener's pipeline and counts every connection it accepts against the
/// connection limits, in the order the listener accepted them. Counting later, as each
/// connection becomes active on its own event loop, would let a connection that arrived
/// later take the place of one that arrived earlier.
///
/// The connection's ``ConnectionHandler`` takes the decision with ``ticket(for:)`` and
/// refuses the client with it; the place is given back when the connection closes, whether
/// or not a handler was ever made for it.
final class AdmissionGate: ChannelInboundHandler, Sendable {
    typealias InboundIn = any Channel
    typealias InboundOut = any Channel

    private let core: HostCore
    private let isLocal: Bool
    /// Decisions not yet taken by their connection's handler, by connection.
    private let tickets = NIOLockedValueBox<[ObjectIdentifier: AdmissionTicket]>([:])

    init(core: HostCore, isLocal: Bool) {
        self.core = core
        self.isLocal = isLocal
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let child = unwrapInboundIn(data)
        let peer = isLocal ? nil : child.remoteAddress.flatMap(ConnectionHandler.peerKey)
        core.totals.connections.wrappingAdd(1, ordering: .relaxed)
        let admission = core.admit(peer: peer, isLocal: isLocal)
        let ticket = AdmissionTicket(peer: peer, admission: admission)
        let key = ObjectIdentifier(child)
        tickets.withLockedValue { $0[key] = ticket }
        let (core, isLocal, tickets) = (self.core, self.isLocal, self.tickets)
        child.closeFuture.whenComplete { _ in
            tickets.withLockedValue { if $0[key] === ticket { $0[key] = nil } }
            if case .success(let slot) = admission { core.leave(peer: peer, isLocal: isLocal, slot: slot) }
        }
        context.fireChannelRead(data)
    }

    /// A connection the gate did not see: it is closed rather than served uncounted.
    struct NotCounted: Error, CustomStringConvertible {
        var description: String { "a connection reached the host without being counted against its limits" }
    }

    /// The decision about `channel`, once: its handler takes it as the channel is set up.
    func ticket(for channel: any Channel) -> AdmissionTicket? {
        tickets.withLockedValue { $0.removeValue(forKey: ObjectIdentifier(channel)) }
    }
}
