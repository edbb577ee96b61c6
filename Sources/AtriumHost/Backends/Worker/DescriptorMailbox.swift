import CAtriumSystem
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// One end of the socket (SOCK_SEQPACKET) that carries open descriptors between the host and
/// a worker (SCM_RIGHTS): a file a plugin offers, a finished upload the host hands it. Each
/// descriptor goes with a tag (the call or delivery it belongs to) before the frame that names
/// it, so when the frame arrives its descriptor is already in the socket; one taken for
/// another frame waits here, a few at most. Owns its socket and the descriptors it holds.
final class DescriptorMailbox: Sendable {
    private let socket: Int32
    private let held = Mutex<[UInt64: Int32]>([:])
    /// The most descriptors kept for frames that have not come (a peer that sends descriptors
    /// and no frames cannot make this side hold more).
    static let maxHeld = 16

    init(socket: Int32) { self.socket = socket }

    deinit {
        close(socket)
        for descriptor in held.withLock({ Array($0.values) }) { close(descriptor) }
    }

    /// Sends `descriptor` (which stays the caller's) tagged `tag`, without waiting: false when
    /// the other side does not read its socket, or is gone.
    func send(_ descriptor: Int32, tag: UInt64) -> Bool {
        atrium_send_tagged_descriptor(socket, descriptor, tag, 0) == 0
    }

    /// The descriptor tagged `tag`, now the caller's; nil when it did not come.
    func take(_ tag: UInt64) -> Int32? {
        held.withLock { held -> Int32? in
            if let descriptor = held.removeValue(forKey: tag) { return descriptor }
            while true {
                var descriptor: Int32 = -1
                var received: UInt64 = 0
                guard atrium_receive_tagged_descriptor(socket, &descriptor, &received, 0) == 1 else { return nil }
                guard descriptor >= 0 else { continue }
                if received == tag { return descriptor }
                if held.count >= Self.maxHeld, let oldest = held.keys.min() {
                    close(held.removeValue(forKey: oldest)!)
                }
                if let earlier = held.updateValue(descriptor, forKey: received) { close(earlier) }
            }
        }
    }
}
