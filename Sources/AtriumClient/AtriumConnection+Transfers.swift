public import AtriumProtocol
import AtriumValues
public import Foundation
import NIOCore
import Synchronization

/// What arrives for a transfer this client has attached (CONTRACT section 8).
public enum TransferEvent: Sendable {
    /// A download's bytes.
    case chunk(ChunkFrame)
    /// An upload's bytes the host holds on stable storage, and the window from there.
    case ack(AckFrame)
    /// Where the transfer stands (on every change, and each second while bytes move).
    case state(TransferStateFrame)
}

extension AtriumConnection {
    /// Attaches to `transfer` (a download: holding `offset` bytes, granting `window`): the host's
    /// `attached`, and the transfer's frames from then on, until it is detached, ends, or the
    /// connection ends. The latest attach wins: an earlier attachment's stream ends.
    public func attachTransfer(_ transfer: UUID, offset: UInt64? = nil, window: UInt64? = nil, timeout: Duration? = nil)
        async throws -> (attached: AttachedFrame, events: AsyncStream<TransferEvent>)
    {
        // Attached already, by the request that started it, and not taken up since.
        let started = state.withLock { $0.startedDownloads.removeValue(forKey: transfer) }
        if let started, (offset ?? 0) == 0 {
            if let window, window != started.attached.window {
                // The window this run wants, from the bytes held (none).
                try await send(.transfer(.ack(AckFrame(transfer: transfer, offset: 0, window: window))))
            }
            return (started.attached, started.events)
        }
        let events = newEvents(of: transfer)
        let id = makeNumber()
        let frame = try await call(
            .transfer(.attach(AttachFrame(id: id, transfer: transfer, offset: offset, window: window))),
            awaiting: .attached(id), timeout: timeout)
        guard case .transfer(.attached(let attached)) = frame else {
            stopEvents(of: transfer)
            throw AtriumClientError(.protocolError, "the host answered attach with \(frame.type)")
        }
        if attached.status != .success { stopEvents(of: transfer) }
        return (attached, events)
    }

    /// Sends a transfer frame that has no answer (`chunk`, `ack`, `detach`).
    public func sendTransfer(_ frame: ClientTransferFrame) async throws {
        if case .detach(let transfer) = frame { stopEvents(of: transfer) }
        try await send(.transfer(frame))
    }

    /// Cancels `transfer`: its state after.
    public func cancelTransfer(_ transfer: UUID, timeout: Duration? = nil) async throws -> TransferStateFrame {
        let frame = try await call(
            .transfer(.cancel(transfer: transfer)), awaiting: .canceled(transfer), timeout: timeout)
        guard case .transfer(.state(let state)) = frame else {
            throw AtriumClientError(.protocolError, "the host answered cancelTransfer with \(frame.type)")
        }
        return state
    }

    /// This client's transfers that changed since `since` (all without it), forgetting
    /// `forget` first; the answer's `cursor` is the `since` of the next call.
    public func transfers(since: UInt64? = nil, forget: [UUID] = [], timeout: Duration? = nil) async throws
        -> TransfersFrame
    {
        let id = makeNumber()
        let frame = try await call(
            .transfer(.transfers(TransfersQueryFrame(id: id, since: since, forget: forget))),
            awaiting: .transfers(id), timeout: timeout)
        guard case .transfer(.transfers(let list)) = frame else {
            throw AtriumClientError(.protocolError, "the host answered transfers with \(frame.type)")
        }
        return list
    }

    /// A URL and a bearer that reach `transfer` over HTTPS (curl, a browser, the phone's own
    /// background downloader) until the answer's `expires`; a refusal has a status other than
    /// success and says why in `error`.
    public func transferLink(_ transfer: UUID, timeout: Duration? = nil) async throws -> TransferLinkFrame {
        let id = makeNumber()
        let frame = try await call(.transfer(.link(id: id, transfer: transfer)), awaiting: .link(id), timeout: timeout)
        guard case .transfer(.link(let link)) = frame else {
            throw AtriumClientError(.protocolError, "the host answered transferLink with \(frame.type)")
        }
        return link
    }

    /// The most bytes a started download not yet taken up holds here: the window the request
    /// asked for (or less, when the host granted less) and one megabyte for chunks in flight.
    static func startedLimit(_ granted: UInt64) -> Int {
        Int(min(granted, DownloadOperation.defaultWindow)) + (1 << 20)
    }

    func stopEvents(of transfer: UUID) {
        state.withLock { state in
            state.startedDownloads[transfer] = nil
            return state.transfers.removeValue(forKey: transfer)
        }?.finish()
    }

    /// A response's `attached` (on the event loop, before the frames after it): a download
    /// attached with the request that started it, waiting for ``attachTransfer(_:offset:window:timeout:)``.
    func downloadStarted(_ attached: AttachedFrame, answering key: WaitKey) {
        guard attached.status == .success else { return }
        // Only a request that asked, and whose caller still waits, has its download started;
        // any other attached download is detached at once, so the host stops sending it.
        let asked = state.withLock { state in
            state.startingRequests.remove(key) != nil && state.waiters[key] != nil
        }
        guard asked, attached.direction == "download" else {
            try? sendNow(.transfer(.detach(transfer: attached.transfer)))
            return
        }
        let events = newEvents(of: attached.transfer)
        state.withLock {
            $0.startedDownloads[attached.transfer] = StartedDownload(attached: attached, events: events)
        }
    }

    /// Where `transfer`'s frames go from now on; an earlier stream of it ends.
    private func newEvents(of transfer: UUID) -> AsyncStream<TransferEvent> {
        let (events, continuation) = AsyncStream<TransferEvent>.makeStream(bufferingPolicy: .unbounded)
        let earlier = state.withLock { state in
            defer { state.transfers[transfer] = continuation }
            return state.transfers[transfer]
        }
        earlier?.finish()
        return events
    }

    /// A transfer frame from the host, on the event loop.
    func receivedTransfer(_ frame: HostTransferFrame) {
        switch frame {
        case .attached(let attached):
            _ = deliver(.transfer(frame), to: .attached(attached.id))
        case .transfers(let list):
            _ = deliver(.transfer(frame), to: .transfers(list.id))
        case .link(let link):
            _ = deliver(.transfer(frame), to: .link(link.id))
        case .chunk(let chunk):
            let (events, overflowed) = state.withLock { state in
                let events = state.transfers[chunk.transfer]
                guard var started = state.startedDownloads[chunk.transfer] else { return (events, false) }
                // Not taken up yet: held here, up to the window it was started with.
                started.buffered += chunk.data.readableBytes
                guard started.buffered <= Self.startedLimit(started.attached.window) else {
                    state.startedDownloads[chunk.transfer] = nil
                    state.transfers[chunk.transfer] = nil
                    return (events, true)
                }
                state.startedDownloads[chunk.transfer] = started
                return (events, false)
            }
            if overflowed {
                // The host sent past the window the request asked for: the start is dropped, and
                // the host told to stop (the operation attaches as usual).
                events?.finish()
                try? sendNow(.transfer(.detach(transfer: chunk.transfer)))
            } else {
                events?.yield(.chunk(chunk))
            }
        case .ack(let ack):
            _ = state.withLock { $0.transfers[ack.transfer] }?.yield(.ack(ack))
        case .state(let told):
            // The answer to a cancel goes to its caller; every state to the transfer's stream.
            _ = deliver(.transfer(frame), to: .canceled(told.transfer))
            let events = state.withLock { state -> AsyncStream<TransferEvent>.Continuation? in
                let events = state.transfers[told.transfer]
                // Ended, or taken elsewhere: nothing more comes for it here.
                if ["completed", "failed", "canceled", "expired"].contains(told.state)
                    || told.error == "attachedElsewhere"
                {
                    state.transfers[told.transfer] = nil
                }
                return events
            }
            events?.yield(.state(told))
            if events != nil, state.withLock({ $0.transfers[told.transfer] == nil }) { events?.finish() }
        }
    }
}
