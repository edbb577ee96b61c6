import CAvahi
import Dispatch
import Synchronization

/// Why Avahi cannot be used, in words for the operator.
public struct AvahiError: Error, Sendable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }

    init(code: Int32, doing what: String) {
        let reason = String(cString: avahi_strerror(code))
        if code == Int32(AVAHI_ERR_NO_DAEMON) || code == Int32(AVAHI_ERR_DBUS_ERROR)
            || code == Int32(AVAHI_ERR_DISCONNECTED)
        {
            description =
                "\(what): avahi-daemon is not reachable over the system D-Bus (\(reason))"
        } else {
            description = "\(what): \(reason)"
        }
    }
}

/// One connection to avahi-daemon over the system D-Bus (`DBUS_SYSTEM_BUS_ADDRESS` when set),
/// on a thread of its own: Avahi's threaded poll. Avahi calls `stateChanged` (and the
/// callbacks of what is made with the client) on that thread with the poll's lock held;
/// everything else reaches the client through ``locked(_:)``.
///
/// The client is made with `AVAHI_CLIENT_NO_FAIL`: while avahi-daemon is not running the
/// client waits for it (state `AVAHI_CLIENT_CONNECTING`). Without a system bus at all, or when
/// the daemon goes away later (`AVAHI_CLIENT_FAILURE`, `AVAHI_ERR_DISCONNECTED`), the owner
/// closes this session and makes a new one.
final class AvahiSession: @unchecked Sendable {
    typealias StateHandler = @Sendable (_ client: OpaquePointer, _ state: AvahiClientState) -> Void

    private let poll: OpaquePointer
    /// Touched only with the poll's lock held (in a callback, or in ``locked(_:)``).
    private var client: OpaquePointer?
    private let stateChanged: StateHandler
    /// Whether the poll is freed (by ``close()``, or by a failed init).
    private let finished = Mutex(false)

    /// Starts the poll thread and connects; throws when there is no system bus to reach
    /// avahi-daemon through.
    init(stateChanged: @escaping StateHandler) throws(AvahiError) {
        guard let poll = avahi_threaded_poll_new() else { throw AvahiError("Avahi's poll thread could not be made") }
        self.poll = poll
        self.stateChanged = stateChanged
        var error: Int32 = 0
        avahi_threaded_poll_lock(poll)
        let made = avahi_client_new(
            avahi_threaded_poll_get(poll), AVAHI_CLIENT_NO_FAIL,
            { client, state, userdata in
                guard let client, let userdata else { return }
                Unmanaged<AvahiSession>.fromOpaque(userdata).takeUnretainedValue().stateChanged(client, state)
            }, Unmanaged.passUnretained(self).toOpaque(), &error)
        client = made
        avahi_threaded_poll_unlock(poll)
        guard made != nil else {
            avahi_threaded_poll_free(poll)
            finished.withLock { $0 = true }
            throw AvahiError(code: error, doing: "cannot reach avahi-daemon")
        }
        guard avahi_threaded_poll_start(poll) >= 0 else {
            avahi_threaded_poll_lock(poll)
            avahi_client_free(made)
            client = nil
            avahi_threaded_poll_unlock(poll)
            avahi_threaded_poll_free(poll)
            finished.withLock { $0 = true }
            throw AvahiError("Avahi's poll thread could not be started")
        }
    }

    /// Runs `body` with the poll's lock held and the client (nil once closed). Never call it
    /// from one of Avahi's callbacks: they already hold the lock.
    func locked<T>(_ body: (OpaquePointer?) -> T) -> T {
        if finished.withLock({ $0 }) { return body(nil) }
        avahi_threaded_poll_lock(poll)
        defer { avahi_threaded_poll_unlock(poll) }
        return body(client)
    }

    /// The client's last error, as words.
    static func lastError(of client: OpaquePointer) -> String {
        String(cString: avahi_strerror(avahi_client_errno(client)))
    }

    /// Frees the client (and with it every entry group, browser and resolver made with it:
    /// a group's records are withdrawn from the network) and stops the thread. Not from a
    /// callback. Safe to call twice.
    func close() {
        let first = finished.withLock { finished in
            defer { finished = true }
            return !finished
        }
        guard first else { return }
        avahi_threaded_poll_lock(poll)
        if let client { avahi_client_free(client) }
        client = nil
        avahi_threaded_poll_unlock(poll)
        avahi_threaded_poll_stop(poll)
        avahi_threaded_poll_free(poll)
    }

    deinit { close() }
}

/// An ``AvahiSession`` kept up: made on ``start()``, made again after a failed attempt (no
/// system bus yet) every `retryInterval`, and after the daemon goes away
/// (`AVAHI_CLIENT_FAILURE`), until ``stop(_:)``. The advertiser and the browser each own one.
final class AvahiLink: @unchecked Sendable {
    private let queue: DispatchQueue
    /// Touched on the queue only.
    private var session: AvahiSession?
    private let stopped = Mutex(false)
    private let retryInterval: DispatchTimeInterval
    private let stateChanged: AvahiSession.StateHandler
    private let unreachable: @Sendable (AvahiError) -> Void

    /// `stateChanged` is called on Avahi's thread with the lock held, `AVAHI_CLIENT_FAILURE`
    /// included (the owner forgets what it made with that client; the link then reconnects);
    /// `unreachable` on the link's queue after each attempt that finds no way to the daemon.
    init(
        label: String, retryInterval: DispatchTimeInterval, stateChanged: @escaping AvahiSession.StateHandler,
        unreachable: @escaping @Sendable (AvahiError) -> Void
    ) {
        queue = DispatchQueue(label: label)
        self.retryInterval = retryInterval
        self.stateChanged = stateChanged
        self.unreachable = unreachable
    }

    func start() {
        queue.async { self.connect() }
    }

    /// Runs `body` on the link's queue, with the poll's lock held and the client when
    /// connected (nil otherwise).
    func withClient(_ body: @escaping @Sendable (OpaquePointer?) -> Void) {
        queue.async {
            if let session = self.session { session.locked(body) } else { body(nil) }
        }
    }

    /// Stops for good: `cleanup` runs under the lock (the owner forgets its Avahi objects),
    /// then the client is freed. Returns once no more callbacks come.
    func stop(_ cleanup: (OpaquePointer?) -> Void) {
        stopped.withLock { $0 = true }
        queue.sync {
            session?.locked(cleanup)
            session?.close()
            session = nil
        }
    }

    /// On the queue.
    private func connect() {
        guard !stopped.withLock({ $0 }) else { return }
        do {
            session = try AvahiSession { [weak self] client, state in
                guard let self else { return }
                self.stateChanged(client, state)
                guard state == AVAHI_CLIENT_FAILURE else { return }
                // This client is done; it is freed off Avahi's thread, and a new one waits
                // for the daemon to come back.
                self.queue.async {
                    self.session?.close()
                    self.session = nil
                    self.connect()
                }
            }
        } catch {
            unreachable(error)
            queue.asyncAfter(deadline: .now() + retryInterval) { [weak self] in self?.connect() }
        }
    }
}
