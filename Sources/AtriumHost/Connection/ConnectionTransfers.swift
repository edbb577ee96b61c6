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
/// Moving bytes is a pump: chunks are read a few at a time on the service's thread pool (at
/// most ``readAhead`` held ready), and written one at a time, each once the last has gone to
/// the socket. So data never puts more than one chunk ahead of an answer to a request, and a
/// client that does not read holds a few chunks of the host's memory, not its window.
///
/// On the connection's event loop only.
final class ConnectionTransfers {
    /// A chunk is being read.
    private var reading = false
    /// Chunks read and waiting for the last one to be written, each with the attachment it was
    /// read for.
    private var ready: [(chunk: ChunkFrame, generation: UInt64)] = []
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
            guard let (answer, sends) = self.attach(attach, on: connection) else { return }
            connection.write(.transfer(.attached(answer)))
            if sends { pump(on: connection) }
        case .ack(let ack):
            if case .state(let state) = service.ack(ack, owner: owner, connection: connection.id) {
                // A download's completion, once journaled: the client does not wait for it.
                write(state, on: connection, paced: true)
            }
            // Whatever the ack did (moved a window, ended a download, refused one), the
            // connection's room may have grown: another download may go on.
            pump(on: connection)
        case .detach(let transfer):
            service.detach(transfer, owner: owner, connection: connection.id)
            pump(on: connection)
        case .cancel(let transfer):
            let (answer, other) = service.cancel(transfer, owner: owner, connection: connection.id)
            if let other { service.tell(answer, to: other) }
            write(answer, on: connection, holdingFrames: true)
            pump(on: connection)
        case .transfers(let query):
            let list = service.list(query, owner: owner)
            guard let pending = list.transfers.first(where: service.waitsForJournal) else {
                return connection.write(.transfer(.transfers(list)))
            }
            // An outcome listed goes out once the journal holds it, as when it is told; the
            // answer goes whatever the write did (a query is always answered).
            let answer = heldAnswer(on: connection, link)
            service.afterJournal(of: TransferID(pending.transfer)) { _ in answer.tell(.transfers(list)) }
        case .link(let request, let transfer):
            service.link(
                request: request, transfer: transfer, owner: owner, address: connection.httpsAddress
            ) { frame in link.tell(.link(frame)) }
        case .chunk(let chunk):
            // Written and synced off the loop; the `ack` comes from there.
            if case .state(let state) = service.chunk(chunk, owner: owner, connection: connection.id) {
                write(state, on: connection)
            }
        }
    }

    /// Writes `state`: at once, unless it tells an outcome, which waits for the journal
    /// (``TransferService/tell(_:to:paced:)``); `holdingFrames`: the client's next frames wait
    /// for it (the answer to a request of its own, such as `cancelTransfer`).
    private func write(
        _ state: TransferStateFrame, on connection: ConnectionHandler, paced: Bool = false, holdingFrames: Bool = false
    ) {
        guard connection.core.transfers.waitsForJournal(state), let link = connection.link else {
            return connection.write(.transfer(.state(state)))
        }
        let peer = holdingFrames ? heldAnswer(on: connection, link) : TransferPeer(link)
        connection.core.transfers.tell(state, to: peer, paced: paced)
    }

    /// Where an answer that waits for the journal goes: the client's next frames wait unread
    /// until it has been written (``ConnectionHandler/answerWaits()``).
    private func heldAnswer(on connection: ConnectionHandler, _ link: ConnectionLink) -> TransferPeer {
        connection.answerWaits()
        return TransferPeer { frame in
            link.run { connection in
                connection.write(.transfer(frame))
                connection.answerWent()
            }
        }
    }

    /// Attaches a transfer here (an `attach`, or a request's that started its download): the
    /// answer, to be written before the pump sends its chunks, and whether there are chunks to
    /// send (a download attached). Nil before hello, and once the connection has closed (an
    /// answer that comes after it attaches nothing to it).
    func attach(_ attach: AttachFrame, on connection: ConnectionHandler) -> (answer: AttachedFrame, sends: Bool)? {
        guard !connection.isClosed, let owner = connection.session.owner, let link = connection.link else {
            return nil
        }
        let outcome = connection.core.transfers.attach(
            attach, owner: owner, peer: TransferPeer(link), connection: connection.id)
        if let (other, state) = outcome.displaced {
            other.tell(.state(state))
        }
        return (outcome.answer, outcome.sends)
    }

    // MARK: - Sending downloads

    /// The most chunks read in one go (one hop to the disk's threads) and held ready: a
    /// connection holds at most this many chunks and the one being written, whatever its
    /// client's windows.
    static let readAhead = 4

    /// Reads and writes the next chunks, as far as the windows and the pump allow.
    func pump(on connection: ConnectionHandler) {
        guard !connection.isClosed else { return }
        let service = connection.core.transfers
        while true {
            writeReady(on: connection)
            // The next reads go on while the ready chunks are written.
            guard !reading, ready.count <= 1, let eventLoop = connection.eventLoop else { return }
            var batch: [(id: TransferID, file: DownloadFile, range: Range<Int64>, generation: UInt64)] = []
            while batch.count < Self.readAhead - ready.count, let next = service.nextChunk(for: connection.id) {
                batch.append(next)
            }
            guard !batch.isEmpty else { return }
            armStateTimer(on: connection)
            // What the page cache holds is read here at once, with no hop to the disk's threads.
            let allocator = connection.allocator
            while let next = batch.first, let data = next.file.cachedBuffer(next.range, allocator: allocator) {
                ready.append(
                    (
                        ChunkFrame(transfer: next.id.uuid, offset: UInt64(next.range.lowerBound), data: data),
                        next.generation
                    ))
                batch.removeFirst()
            }
            if batch.isEmpty { continue }
            readOffLoop(batch, on: connection, eventLoop: eventLoop)
            writeReady(on: connection)
            return
        }
    }

    /// Writes the first ready chunk, unless one is being written.
    private func writeReady(on connection: ConnectionHandler) {
        let service = connection.core.transfers
        while !writing, !ready.isEmpty {
            let (chunk, generation) = ready.removeFirst()
            // Read for an attachment that is no longer the transfer's: dropped, never sent.
            guard service.isCurrent(TransferID(chunk.transfer), on: connection.id, generation: generation) else {
                continue
            }
            writing = true
            let sent = connection.eventLoop?.makePromise(of: Void.self)
            sent?.futureResult.assumeIsolated().whenComplete { [weak self] _ in
                self?.writing = false
                self?.pump(on: connection)
            }
            connection.writeChunk(chunk, promise: sent)
        }
    }

    /// Reads `batch` on the disk's threads (bytes the page cache does not hold).
    private func readOffLoop(
        _ batch: [(id: TransferID, file: DownloadFile, range: Range<Int64>, generation: UInt64)],
        on connection: ConnectionHandler, eventLoop: any EventLoop
    ) {
        let service = connection.core.transfers
        reading = true
        let allocator = connection.allocator
        let reads = batch.map { ($0.file, $0.range) }
        service.pool.runIfActive(eventLoop: eventLoop) { () -> [Result<ByteBuffer, DownloadFile.ReadFailure>] in
            reads.map { file, range in file.buffer(range, allocator: allocator) }
        }.assumeIsolated().whenComplete { [weak self] result in
            guard let self else { return }
            self.reading = false
            guard !connection.isClosed, case .success(let reads) = result else {
                // The pool is stopping: the host is shutting down.
                return
            }
            for (next, read) in zip(batch, reads) {
                switch read {
                case .success(let data):
                    self.ready.append(
                        (
                            ChunkFrame(transfer: next.id.uuid, offset: UInt64(next.range.lowerBound), data: data),
                            next.generation
                        ))
                case .failure(let failure):
                    if let (link, state) = service.readFailed(next.id, changed: failure == .changed) {
                        service.tell(state, to: link)
                    }
                }
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
        ready = []
        core.transfers.connectionClosed(connection)
    }
}
