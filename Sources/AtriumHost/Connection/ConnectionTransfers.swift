import AtriumProtocol
import AtriumTransfers
import AtriumValues
import Foundation
import NIOCore

/// A connection's transfer frames (CONTRACT section 8): `attach`, `chunk`, `ack`, `detach`,
/// `cancelTransfer` and `transfers`. The transfers themselves, their windows included, are the
/// host's (``TransferService``): this family hands their frames over, writes what comes back,
/// and moves the bytes of the downloads attached here.
///
/// Moving bytes is a pump with at most one chunk being read (on the service's thread pool) and
/// one written: the next chunk is read while the last is being written, and written only once
/// the last has gone to the socket. So data never puts more than one chunk ahead of an answer
/// to a request, and a client that does not read holds two chunks of the host's memory, not
/// its window.
///
/// On the connection's event loop only.
final class ConnectionTransfers {
    /// A chunk is being read.
    private var reading = false
    /// A chunk read and waiting for the last one to be written, with the attachment it was read for.
    private var ready: (chunk: ChunkFrame, generation: UInt64)?
    /// A chunk written and not yet gone to the socket.
    private var writing = false
    /// While bytes move: the timer that sends each attached transfer's state every second.
    private var stateTimer: Scheduled<Void>?

    func frame(_ frame: ClientTransferFrame, on connection: ConnectionHandler) {
        let service = connection.core.transfers
        // The caller is known once hello is accepted, which is before any frame reaches here.
        guard let owner = connection.session.owner, let link = connection.link else { return }
        switch frame {
        case .attach(let attach):
            let outcome = service.attach(attach, owner: owner, link: link, connection: connection.id)
            if let (other, state) = outcome.displaced {
                other.run { $0.write(.transfer(.state(state))) }
            }
            connection.write(.transfer(.attached(outcome.answer)))
            if outcome.sends { pump(on: connection) }
        case .ack(let ack):
            if case .state(let state) = service.ack(ack, owner: owner, connection: connection.id) {
                connection.write(.transfer(.state(state)))
            }
            // Whatever the ack did (moved a window, ended a download, refused one), the
            // connection's room may have grown: another download may go on.
            pump(on: connection)
        case .detach(let transfer):
            service.detach(transfer, owner: owner, connection: connection.id)
            pump(on: connection)
        case .cancel(let transfer):
            let (answer, other) = service.cancel(transfer, owner: owner, connection: connection.id)
            other?.run { $0.write(.transfer(.state(answer))) }
            connection.write(.transfer(.state(answer)))
            pump(on: connection)
        case .transfers(let query):
            connection.write(.transfer(.transfers(service.list(query, owner: owner))))
        case .chunk(let chunk):
            // Written and synced off the loop; the `ack` comes from there.
            if case .state(let state) = service.chunk(chunk, owner: owner, connection: connection.id) {
                connection.write(.transfer(.state(state)))
            }
        }
    }

    // MARK: - Sending downloads

    /// Reads and writes the next chunks, as far as the windows and the pump allow.
    func pump(on connection: ConnectionHandler) {
        guard !connection.isClosed else { return }
        if !writing, let (chunk, generation) = ready {
            ready = nil
            let service = connection.core.transfers
            guard service.isCurrent(TransferID(chunk.transfer), on: connection.id, generation: generation) else {
                return pump(on: connection)
            }
            writing = true
            let sent = connection.eventLoop?.makePromise(of: Void.self)
            sent?.futureResult.assumeIsolated().whenComplete { [weak self] _ in
                self?.writing = false
                self?.pump(on: connection)
            }
            connection.write(.transfer(.chunk(chunk)), promise: sent)
        }
        guard !reading, ready == nil, let eventLoop = connection.eventLoop else { return }
        let service = connection.core.transfers
        guard let next = service.nextChunk(for: connection.id) else { return }
        reading = true
        armStateTimer(on: connection)
        let count = Int(next.range.count)
        let offset = next.range.lowerBound
        let file = next.file
        let allocator = connection.allocator
        service.pool.runIfActive(eventLoop: eventLoop) { () -> (ByteBuffer, Bool)? in
            var buffer = allocator.buffer(capacity: count)
            guard file.isUnchanged else { return (buffer, true) }
            var failed = false
            buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { memory in
                let got = file.read(into: memory, count: count, at: offset)
                failed = got != count
                return got ?? 0
            }
            return failed ? nil : (buffer, false)
        }.assumeIsolated().whenComplete { [weak self] result in
            guard let self else { return }
            self.reading = false
            guard !connection.isClosed else { return }
            switch result {
            case .success(let (data, changed)?) where !changed:
                // Read for an attachment that is no longer the transfer's: dropped, never sent.
                if service.isCurrent(next.id, on: connection.id, generation: next.generation) {
                    self.ready = (
                        ChunkFrame(transfer: next.id.uuid, offset: UInt64(offset), data: data), next.generation
                    )
                }
            case .success(let read):
                if let (link, state) = service.readFailed(next.id, changed: read?.1 ?? false) {
                    link.run { $0.write(.transfer(.state(state))) }
                }
            case .failure:
                // The pool is stopping: the host is shutting down.
                return
            }
            self.pump(on: connection)
        }
    }

    /// Sends the state of each transfer attached here every second while bytes move
    /// (CONTRACT section 8), until none is left attached.
    private func armStateTimer(on connection: ConnectionHandler) {
        guard stateTimer == nil else { return }
        stateTimer = connection.schedule(in: .seconds(1)) { [weak self] connection in
            guard let self else { return }
            self.stateTimer = nil
            let service = connection.core.transfers
            let attached = service.attached(on: connection.id)
            for id in attached {
                if let state = service.runningState(of: id, on: connection.id) {
                    connection.write(.transfer(.state(state)))
                }
            }
            if !attached.isEmpty { self.armStateTimer(on: connection) }
        }
    }

    /// The connection is gone: its transfers wait, resumable.
    func connectionEnded(core: HostCore, connection: UInt64) {
        stateTimer?.cancel()
        stateTimer = nil
        ready = nil
        core.transfers.connectionClosed(connection)
    }
}
