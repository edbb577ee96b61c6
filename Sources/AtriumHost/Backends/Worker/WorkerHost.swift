import AtriumProtocol
import AtriumTransfers
import AtriumValues
import CAtriumPlugin
import Dispatch
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// The host as a plugin in a worker process sees it: each call of the host table becomes a
/// frame to `atriumd` over the worker's link (``WorkerFrame``). Answers and the plugin's
/// closes go out at once; `send`, `close_channel` and `launch_uri` wait for the host's reply,
/// as they do in process. The one thread that may not wait is the one that reads the link,
/// where a plugin's nonblocking `request` runs (ATRIUM_PLUGIN_NONBLOCKING): there, those
/// three are refused at once (the reply could never be read), and the log says so.
final class WorkerHost: BackendHost, @unchecked Sendable {
    /// The links to the host, by number.
    private let links: [WorkerPipes]
    let maxQueuedPerService = Int.max
    /// Requests handed to the plugin and not answered yet: the link each came on, by id.
    private let pending = NIOLockedValueBox<[UInt64: Int]>([:])
    /// Calls waiting for the host's reply.
    private let calls = NIOLockedValueBox<(next: UInt64, waiting: [UInt64: Reply])>((1, [:]))
    /// Set while the plugin's own serial queue waits for a launch: a launch of the plugin's
    /// own scheme arriving meanwhile would wait on it, and is refused at once instead.
    let launchingFromOwnQueue = NIOLockedValueBox<Int>(0)
    private let logger: Logger

    final class Reply: @unchecked Sendable {
        let done = DispatchSemaphore(value: 0)
        var frame: WorkerFrame?
    }

    /// Offers a file: its descriptor crosses to the host on the descriptor socket (SCM_RIGHTS),
    /// tagged with the call, before the call itself.
    func offer(_ descriptor: Int32, name: String?, for request: UInt64, from backend: any ServiceBackend)
        -> Result<TransferID, TransferService.OfferRefusal>
    {
        guard let link = pending.withLockedValue({ $0[request] }) else { return .failure(.unknownRequest) }
        guard descriptor >= 0, fcntl(descriptor, F_GETFD) >= 0 else { return .failure(.file(.notOpen)) }
        guard let mailbox else { return .failure(.unavailable("this worker has no way to pass a file")) }
        let reply = call("offer_file", on: link) { call in
            // Sent first: when the host reads the call, the descriptor is there.
            _ = mailbox.send(descriptor, tag: call)
            return .offer(call: call, id: request, name: name)
        }
        return Self.transfer(from: reply)
    }

    func accept(
        size: Int64, maxSize: Int64, name: String?, for request: UInt64, from backend: any ServiceBackend
    ) -> Result<TransferID, TransferService.OfferRefusal> {
        guard let link = pending.withLockedValue({ $0[request] }) else { return .failure(.unknownRequest) }
        let reply = call("accept_upload", on: link) {
            .accept(call: $0, id: request, size: size, maxSize: maxSize, name: name)
        }
        return Self.transfer(from: reply)
    }

    /// The transfer of the host's reply to `offer` or `accept`, or why there is none.
    static func transfer(from reply: WorkerFrame?) -> Result<TransferID, TransferService.OfferRefusal> {
        guard case .reply(_, let error, _, _, let reason, let transfer) = reply else {
            return .failure(.unavailable("the host did not answer"))
        }
        if let transfer { return .success(TransferID(transfer)) }
        return .failure(TransferService.OfferRefusal(name: error ?? "", reason: reason ?? "refused by the host"))
    }

    func uploadDone(
        _ delivery: UInt64, from backend: any ServiceBackend, status: AppServiceResponseStatus, message: ByteBuffer?,
        error: String?
    ) -> Result<Void, BackendCallError> {
        if let message, message.readableBytes > 0, HostCore.invalidity(of: message) != nil {
            return .failure(.notAValueSet)
        }
        write(
            .uploadDone(
                delivery: delivery, status: UInt64(max(status.rawValue, 0)),
                message: message.flatMap { $0.readableBytes > 0 ? EncodedValueSet(uncheckedBytes: $0) : nil },
                error: error),
            on: 0)
        return .success(())
    }

    /// Where descriptors cross to and from the host (set before the plugin loads).
    var mailbox: DescriptorMailbox?

    func deliveryDropped(_ delivery: UInt64) {}

    init(links: [WorkerPipes], logger: Logger) {
        self.links = links
        self.logger = logger
    }

    private func pipes(_ link: Int) -> WorkerPipes? {
        links.indices.contains(link) ? links[link] : nil
    }

    /// Sends `frame` on link `link`.
    func write(_ frame: WorkerFrame, on link: Int) {
        pipes(link)?.send(frame)
    }

    /// Sends `frame` on link `link`, then runs `then` once it has gone out (or could not):
    /// for the last thing a worker says before it exits.
    func write(_ frame: WorkerFrame, on link: Int, then: @escaping @Sendable () -> Void) {
        pipes(link)?.sendNow(frame)
        then()
    }

    /// Whether the calling thread reads one of the links, where nothing may wait.
    private var onALinksLoop: Bool {
        links.contains { $0.isReadingThread }
    }

    /// Which link each channel's frames came on: the plugin's calls about a channel go back
    /// on it, so that they keep their order with its answers.
    private let channelLinks = NIOLockedValueBox<[UInt64: Int]>([:])

    /// A channel is being opened on `link`.
    func opened(_ channel: UInt64, on link: Int) {
        channelLinks.withLockedValue { $0[channel] = link }
    }

    /// A channel is closed.
    func closed(_ channel: UInt64) {
        _ = channelLinks.withLockedValue { $0.removeValue(forKey: channel) }
    }

    private func link(of channel: UInt64?) -> Int {
        guard let channel else { return 0 }
        return channelLinks.withLockedValue { $0[channel] ?? 0 }
    }

    /// A request arrived on `link` and is about to be handed to the plugin.
    func received(_ request: UInt64, on link: Int) {
        pending.withLockedValue { $0[request] = link }
    }

    /// The host answered `request` itself.
    func answeredByHost(_ request: UInt64) {
        _ = pending.withLockedValue { $0.removeValue(forKey: request) }
    }

    /// The host's reply to call `call`.
    func replied(_ call: UInt64, _ frame: WorkerFrame) {
        guard let reply = calls.withLockedValue({ $0.waiting.removeValue(forKey: call) }) else { return }
        reply.frame = frame
        reply.done.signal()
    }

    /// Sends a call and waits for the host's reply (nil if the host went away meanwhile, or
    /// the call was made on the thread that reads the host's frames, where no reply could
    /// ever be read).
    private func call(_ name: String, on link: Int = 0, _ make: (UInt64) -> WorkerFrame) -> WorkerFrame? {
        if onALinksLoop {
            logger.warning(
                "\(name) called from a nonblocking request: in a worker process that would wait on itself, so it is refused; call it from another thread"
            )
            return nil
        }
        let reply = Reply()
        let id = calls.withLockedValue { calls -> UInt64 in
            let id = calls.next
            calls.next += 1
            calls.waiting[id] = reply
            return id
        }
        write(make(id), on: link)
        // The host answers every call; if it is gone, the worker exits with it.
        reply.done.wait()
        return reply.frame
    }

    func respond(
        to request: UInt64, from backend: any ServiceBackend, status: AppServiceResponseStatus, message: ByteBuffer?,
        error: String?
    ) -> Result<Void, BackendCallError> {
        respond(to: request, status: status, message: message, error: error)
    }

    private func respond(to request: UInt64, status: AppServiceResponseStatus, message: ByteBuffer?, error: String?)
        -> Result<Void, BackendCallError>
    {
        guard let link = pending.withLockedValue({ $0.removeValue(forKey: request) }) else {
            return .failure(.unknownRequest)
        }
        var verdict = Result<Void, BackendCallError>.success(())
        if let message, message.readableBytes > 0, HostCore.invalidity(of: message) != nil {
            // The host checks it again and answers the client with the reason.
            verdict = .failure(.notAValueSet)
        }
        write(
            .respond(
                id: request, status: UInt64(max(status.rawValue, 0)),
                message: message.flatMap { $0.readableBytes > 0 ? EncodedValueSet(uncheckedBytes: $0) : nil },
                error: error),
            on: link)
        return verdict
    }

    func answer(_ request: UInt64, status: AppServiceResponseStatus, error: String) {
        _ = respond(to: request, status: status, message: nil, error: error)
    }

    func isPending(_ request: UInt64) -> Bool {
        pending.withLockedValue { $0[request] != nil }
    }

    func queueWasFull(_ backend: any ServiceBackend, limit: Int) {}

    func send(_ message: ByteBuffer, on channel: UInt64, from backend: any ServiceBackend)
        -> Result<UInt64, BackendCallError>
    {
        guard HostCore.invalidity(of: message) == nil else { return .failure(.notAValueSet) }
        let reply = call("send", on: link(of: channel)) {
            .send(call: $0, channel: channel, message: EncodedValueSet(uncheckedBytes: message))
        }
        guard case .reply(_, let error, let id, _, _, _) = reply else { return .failure(.busy) }
        if let error { return .failure(BackendCallError(name: error) ?? .shuttingDown) }
        return .success(id ?? 0)
    }

    func closeChannel(_ channel: UInt64, from backend: any ServiceBackend, status: AppServiceClosedStatus)
        -> Result<Void, BackendCallError>
    {
        let reply = call("close_channel", on: link(of: channel)) {
            .close(call: $0, channel: channel, status: UInt64(max(status.rawValue, 0)))
        }
        guard case .reply(_, let error, _, _, _, _) = reply else { return .failure(.busy) }
        if let error { return .failure(BackendCallError(name: error) ?? .shuttingDown) }
        return .success(())
    }

    func launch(fromBackend backend: any ServiceBackend, channel: UInt64?, uri: String, data: [UInt8]?)
        -> LaunchOutcome
    {
        let fromOwnQueue = (backend as? InProcessPlugin)?.isOnOwnQueue ?? false
        if fromOwnQueue { launchingFromOwnQueue.withLockedValue { $0 += 1 } }
        defer { if fromOwnQueue { launchingFromOwnQueue.withLockedValue { $0 -= 1 } } }
        let payload = data.map { EncodedValueSet(uncheckedBytes: ByteBuffer(bytes: $0)) }
        let reply = call("launch_uri", on: link(of: channel)) {
            .launchUri(call: $0, uri: uri, data: payload, channel: channel)
        }
        guard case .reply(_, _, _, let status, let reason, _) = reply, let status,
            let checked = Int32(exactly: status).flatMap(RemoteLaunchUriStatus.init(checking:))
        else {
            return LaunchOutcome(status: .unknown, error: "the host did not answer the launch")
        }
        return LaunchOutcome(status: checked, error: reason)
    }
}

extension BackendCallError {
    /// The name a refusal travels under between a worker and the host.
    var name: String {
        switch self {
        case .unknownRequest: "unknownRequest"
        case .unknownChannel: "unknownChannel"
        case .notAValueSet: "notAValueSet"
        case .tooLarge: "tooLarge"
        case .shuttingDown: "shuttingDown"
        case .busy: "busy"
        }
    }

    init?(name: String) {
        let all: [BackendCallError] = [
            .unknownRequest, .unknownChannel, .notAValueSet, .tooLarge, .shuttingDown, .busy,
        ]
        guard let match = all.first(where: { $0.name == name }) else { return nil }
        self = match
    }
}
