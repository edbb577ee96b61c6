import AtriumTransfers
import AtriumValues
import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// Whatever answers a package's services: a plugin library loaded into the host
/// (``InProcessPlugin``), a library's declared C functions (``FunctionBackend``), or, later,
/// a worker process. Routing knows this protocol only.
///
/// The host calls a backend from any thread, never holding a lock, and never waits on it
/// while on an event loop: every call that waits for the backend (``open(_:completion:)``,
/// ``launch(_:completion:)``) answers through a completion, which may run on any thread,
/// exactly once. A backend answers requests and reaches clients through the host's side of
/// the seam (``HostCore/respond(to:from:status:message:error:)``,
/// ``HostCore/send(_:on:from:)``, ``HostCore/closeChannel(_:from:status:)``,
/// ``HostCore/launch(fromBackend:channel:uri:data:)``), which checks everything a backend
/// hands it: a backend is third-party code, and in a worker, another process.
protocol ServiceBackend: AnyObject, Sendable {
    /// The package the backend serves.
    var package: String { get }

    /// Asks whether a client may open `channel`; `completion` gets the backend's status (a
    /// backend that has no say answers success).
    func open(_ channel: ChannelInfo, completion: @escaping @Sendable (AppServiceConnectionStatus) -> Void)

    /// Hands over a client's request on an open channel. The backend answers it through
    /// ``HostCore/respond(to:from:status:message:error:)``, once; the host answers it instead
    /// (and refuses the backend's late answer) when it times out or its channel closes.
    /// `message` is a checked ValueSet.
    func request(_ request: UInt64, on channel: UInt64, message: ByteBuffer)

    /// A client's answer to a message the backend sent with ``HostCore/send(_:on:from:)``, or
    /// the host's, when the client did not answer in time or the channel closed (`message`
    /// is then nil). Exactly once per message sent.
    func response(to request: UInt64, on channel: UInt64, status: AppServiceResponseStatus, message: ByteBuffer?)

    /// `channel` is closed: nothing more arrives on it. Once per channel the backend accepted.
    func closed(channel: UInt64, status: AppServiceClosedStatus, by closer: ChannelCloser)

    /// Asks the backend to handle a launch of one of its package's schemes. The host waits
    /// for the completion only up to its response timeout.
    func launch(_ launch: LaunchInfo, completion: @escaping @Sendable (LaunchOutcome) -> Void)

    /// The host answered `request` itself (it timed out, or its channel closed): the
    /// backend's own answer will be refused, and it may drop the request if it has not
    /// started on it.
    func abandoned(request: UInt64, on channel: UInt64, timedOut: Bool)

    /// Stops the backend once the work it has is done; nothing is called on it afterwards.
    /// Returns false when it did not finish within `timeout` (the host then exits without it).
    func shutDown(within timeout: Duration) -> Bool

    /// How the backend is doing, for the operator (`atrium status`).
    var health: BackendHealth { get }

    /// A finished upload for one of the backend's services (CONTRACT section 8): it takes the
    /// descriptor and answers through ``BackendHost/uploadDone(_:from:status:message:error:)``.
    func upload(_ delivery: UploadDelivery) -> DeliveryVerdict

    /// A transfer one of its services made ended before reaching it (canceled, expired, or
    /// removed with its caller's access).
    func transferEnded(_ transfer: TransferID, why: String)
}

extension ServiceBackend {
    /// A backend in the host's process asks the host table (`isPending`) instead.
    func abandoned(request: UInt64, on channel: UInt64, timedOut: Bool) {}

    /// A backend in the host's process is ready for as long as it is loaded.
    var health: BackendHealth { BackendHealth(state: .ready) }

    func upload(_ delivery: UploadDelivery) -> DeliveryVerdict {
        .refused("package \(package) takes no uploads")
    }

    func transferEnded(_ transfer: TransferID, why: String) {}
}

/// How a backend is doing: ready, starting, restarting after a crash, or failed for good
/// (until a reload), with the reason; and for a worker process, its pid and crashes.
struct BackendHealth: Sendable {
    enum State: String, Sendable, CaseIterable {
        case ready, starting, restarting, failed
    }
    var state: State
    var reason: String? = nil
    var pid: Int32? = nil
    /// Crashes within the window the host gives up after.
    var recentCrashes = 0
}

/// A channel a client asks to open.
struct ChannelInfo: Sendable {
    /// The host's id for the channel: the backend names it so in everything it does.
    var id: UInt64
    var service: String
    /// The client's id and name, as it gave them in `hello` (untrusted text).
    var clientId: String
    var clientName: String?
    /// Whether the client came over the network (else through the host's local socket).
    var isRemote: Bool
}

/// A launch handed to a backend.
struct LaunchInfo: Sendable {
    var uri: String
    /// The launch data, a checked ValueSet's bytes, when there is one.
    var data: [UInt8]?
    /// The client the launch is made for ("" when a plugin launched on its own account).
    var clientId: String
    var isRemote: Bool
}

/// Who closed a channel (the C ABI's ATRIUM_CLOSED_BY_).
enum ChannelCloser: Int32, Sendable {
    /// The client sent `close`.
    case client = 0
    /// The client's connection dropped.
    case network = 1
    /// The host is shutting down, or took the package away.
    case host = 2
    /// The backend itself closed it.
    case service = 3
}

/// Why the host did not take what a backend handed it.
enum BackendCallError: Error, Sendable, Hashable {
    /// The request was already answered (also by the host's timeout), or its client is gone.
    case unknownRequest
    /// The channel was never opened by this backend, or is closed by now.
    case unknownChannel
    /// The message is not a valid ValueSet.
    case notAValueSet
    /// The message is over the host's message size limit.
    case tooLarge
    /// The host is shutting down.
    case shuttingDown
    /// The client has as many of the backend's messages unanswered as it may.
    case busy
}

/// The host as a backend reaches it: the host's side of the seam. In `atriumd` this is
/// ``HostCore``; in a worker process, ``WorkerHost``, which carries each call to the host.
/// Every function may be called from any thread, and checks what it is handed.
protocol BackendHost: AnyObject, Sendable {
    /// Answers a client's request (once; see ``ServiceBackend/request(_:on:message:)``).
    func respond(
        to request: UInt64, from backend: any ServiceBackend, status: AppServiceResponseStatus, message: ByteBuffer?,
        error: String?
    ) -> Result<Void, BackendCallError>
    /// Sends the backend's own message to the client of `channel`; returns the id its
    /// answer comes back under.
    func send(_ message: ByteBuffer, on channel: UInt64, from backend: any ServiceBackend)
        -> Result<UInt64, BackendCallError>
    /// Closes one of the backend's channels.
    func closeChannel(_ channel: UInt64, from backend: any ServiceBackend, status: AppServiceClosedStatus)
        -> Result<Void, BackendCallError>
    /// Launches a URI for the backend (for `channel`'s client when given). Blocks until the
    /// launch is answered: call it off the event loop.
    func launch(fromBackend backend: any ServiceBackend, channel: UInt64?, uri: String, data: [UInt8]?)
        -> LaunchOutcome
    /// Offers the file open as `descriptor` (the backend's, which it keeps) to the caller of
    /// `request`, one of the backend's requests waiting for its answer: a download
    /// (CONTRACT section 8), whose id the answer carries as `Transfer`.
    func offer(_ descriptor: Int32, name: String?, for request: UInt64, from backend: any ServiceBackend)
        -> Result<TransferID, TransferService.OfferRefusal>
    /// Accepts an upload of `size` bytes (-1: not known; then at most `maxSize`, -1: the host's
    /// limits) from the caller of `request`.
    func accept(
        size: Int64, maxSize: Int64, name: String?, for request: UInt64, from backend: any ServiceBackend
    ) -> Result<TransferID, TransferService.OfferRefusal>
    /// The backend's answer to a finished upload it was handed.
    func uploadDone(
        _ delivery: UInt64, from backend: any ServiceBackend, status: AppServiceResponseStatus, message: ByteBuffer?,
        error: String?
    ) -> Result<Void, BackendCallError>
    /// A delivery the backend took and will never answer (it was stopped first): the host
    /// hands the upload over again later.
    func deliveryDropped(_ delivery: UInt64)
    /// Answers a request on the backend's behalf, when the backend cannot take it.
    func answer(_ request: UInt64, status: AppServiceResponseStatus, error: String)
    /// Whether `request` still waits for its answer.
    func isPending(_ request: UInt64) -> Bool
    /// How many requests may wait on a backend's queues (`--max-queued-per-service`).
    var maxQueuedPerService: Int { get }
    /// Notes that `backend` refused a request because it had `limit` waiting.
    func queueWasFull(_ backend: any ServiceBackend, limit: Int)
}
