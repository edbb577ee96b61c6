import CAvahi
public import Dispatch
public import Logging
import Synchronization

/// Advertises one DNS-SD service through avahi-daemon, and keeps it advertised: it takes
/// Avahi's alternative name when the name is taken on the network, advertises again when
/// avahi-daemon restarts (or starts late), and withdraws on ``stop()``. Without avahi-daemon
/// it says once, in plain words, that the host is not discoverable and why, and tries again
/// quietly.
public final class DNSSDAdvertiser: @unchecked Sendable {
    /// What is advertised.
    public struct Service: Sendable, Equatable {
        /// The instance name (at most 63 bytes of UTF-8; longer is cut at a character).
        public var name: String
        public var type: String
        public var port: Int
        public var txt: [String]
        /// The interface index to advertise on, or nil for all of them.
        public var interface: Int32?
        /// Only IPv4 (when the listener is bound to an IPv4 address), only IPv6, or both (nil).
        public var ipv6: Bool?

        public init(name: String, type: String, port: Int, txt: [String], interface: Int32? = nil, ipv6: Bool? = nil) {
            self.name = Self.instanceName(name)
            self.type = type
            self.port = port
            self.txt = txt
            self.interface = interface
            self.ipv6 = ipv6
        }

        /// `name` cut to DNS's 63-byte label limit at a character boundary; "Atrium" when empty.
        static func instanceName(_ name: String) -> String {
            var result = ""
            for character in name where !character.isNewline {
                guard result.utf8.count + String(character).utf8.count <= 63 else { break }
                result.append(character)
            }
            return result.isEmpty ? "Atrium" : result
        }
    }

    /// Everything below is touched on Avahi's thread with the poll's lock held, or in
    /// ``AvahiLink/withClient(_:)`` and ``AvahiLink/stop(_:)``, which hold it too.
    private var service: Service
    /// The name in use: the service's, or Avahi's alternative after a conflict.
    private var name: String
    private var group: OpaquePointer?
    /// Set once, at the end of init.
    private var link: AvahiLink!

    private let logger: Logger
    private struct Status {
        var saidUnreachable = false
        var established: String?
    }
    private let status = Mutex(Status())

    /// `retryInterval`: how long to wait before trying again without a system bus.
    public init(_ service: Service, logger: Logger, retryInterval: DispatchTimeInterval = .seconds(5)) {
        self.service = service
        self.name = service.name
        self.logger = logger
        link = AvahiLink(
            label: "atrium.dnssd.advertiser", retryInterval: retryInterval,
            stateChanged: { [weak self] client, state in self?.clientChanged(client, state) },
            unreachable: { [weak self] error in
                guard let self, self.firstTimeUnreachable() else { return }
                self.logger.warning(
                    "not discoverable on the network: \(error). Is avahi-daemon running? Clients can still connect by address; the host advertises itself as soon as avahi-daemon can be reached."
                )
            })
    }

    /// The name the service is advertised under now (nil until avahi-daemon confirms it).
    public var advertisedName: String? { status.withLock { $0.established } }

    /// Starts advertising (asynchronously: the outcome is logged).
    public func start() {
        link.start()
    }

    /// Advertises `service` instead (a new name, port or TXT record). Avahi withdraws the
    /// old records and announces the new ones. The same service again changes nothing.
    public func update(_ service: Service) {
        link.withClient { client in
            guard service != self.service else { return }
            self.service = service
            self.name = service.name
            if let client, avahi_client_get_state(client) == AVAHI_CLIENT_S_RUNNING { self.register(client) }
        }
    }

    /// Withdraws the service (Avahi sends goodbye packets) and disconnects. Returns once done.
    public func stop() {
        link.stop { _ in group = nil }
    }

    /// Whether the host has not yet said that it cannot be found (it says so once, until it
    /// is advertised again).
    private func firstTimeUnreachable() -> Bool {
        status.withLock { status in
            defer { status.saidUnreachable = true }
            return !status.saidUnreachable
        }
    }

    /// On Avahi's thread, lock held.
    private func clientChanged(_ client: OpaquePointer, _ state: AvahiClientState) {
        switch state {
        case AVAHI_CLIENT_S_RUNNING:
            register(client)
        case AVAHI_CLIENT_S_COLLISION, AVAHI_CLIENT_S_REGISTERING:
            // The daemon's own host name is being (re)registered: our records go with it,
            // and come back at S_RUNNING.
            if let group { avahi_entry_group_reset(group) }
        case AVAHI_CLIENT_CONNECTING:
            if firstTimeUnreachable() {
                logger.warning(
                    "not discoverable on the network yet: avahi-daemon is not running. Clients can still connect by address; the host advertises itself as soon as avahi-daemon starts."
                )
            }
        case AVAHI_CLIENT_FAILURE:
            // The daemon went away (or the bus did): the group went with this client, and the
            // link makes a new one, which waits for the daemon to come back. Having said that,
            // the host does not also say it is "not discoverable yet".
            let reason = AvahiSession.lastError(of: client)
            group = nil
            let was = status.withLock { status in
                defer {
                    status.saidUnreachable = status.established != nil
                    status.established = nil
                }
                return status.established
            }
            if was != nil {
                logger.warning(
                    "no longer discoverable: lost avahi-daemon (\(reason)); the host advertises itself again when it is back"
                )
            }
        default:
            break
        }
    }

    /// Adds the service to a fresh entry group and commits it. On Avahi's thread (or under the
    /// lock).
    private func register(_ client: OpaquePointer) {
        if group == nil {
            group = avahi_entry_group_new(
                client,
                { group, state, userdata in
                    guard let group, let userdata else { return }
                    Unmanaged<DNSSDAdvertiser>.fromOpaque(userdata).takeUnretainedValue().groupChanged(group, state)
                }, Unmanaged.passUnretained(self).toOpaque())
        }
        guard let group else {
            logger.error("cannot advertise on the network: \(AvahiSession.lastError(of: client))")
            return
        }
        avahi_entry_group_reset(group)
        for _ in 0..<16 {
            var list: UnsafeMutablePointer<AvahiStringList>? = nil
            for entry in service.txt.reversed() { list = avahi_string_list_add(list, entry) }
            let protocolFamily =
                service.ipv6.map { $0 ? Int32(AVAHI_PROTO_INET6) : Int32(AVAHI_PROTO_INET) }
                ?? Int32(AVAHI_PROTO_UNSPEC)
            let result = avahi_entry_group_add_service_strlst(
                group, service.interface ?? Int32(AVAHI_IF_UNSPEC), protocolFamily, AvahiPublishFlags(0), name,
                service.type, nil, nil, UInt16(clamping: service.port), list)
            avahi_string_list_free(list)
            if result == Int32(AVAHI_ERR_COLLISION) {
                // Taken by a service of this very daemon: the next name.
                takeAlternativeName()
                continue
            }
            if result < 0 {
                logger.error(
                    "cannot advertise \"\(name)\" on the network: \(String(cString: avahi_strerror(result)))")
                return
            }
            let committed = avahi_entry_group_commit(group)
            if committed < 0 {
                logger.error(
                    "cannot advertise \"\(name)\" on the network: \(String(cString: avahi_strerror(committed)))")
            }
            return
        }
    }

    private func takeAlternativeName() {
        guard let next = avahi_alternative_service_name(name) else { return }
        let alternative = String(cString: next)
        avahi_free(next)
        logger.notice(
            "the name \"\(name)\" is taken on this network by another service; advertising as \"\(alternative)\" instead"
        )
        name = alternative
    }

    /// On Avahi's thread, lock held.
    private func groupChanged(_ group: OpaquePointer, _ state: AvahiEntryGroupState) {
        switch state {
        case AVAHI_ENTRY_GROUP_ESTABLISHED:
            status.withLock {
                $0.established = name
                $0.saidUnreachable = false
            }
            logger.info(
                "discoverable on the network as \"\(name)\" (\(service.type), port \(service.port))",
                metadata: ["txt": "\(service.txt.joined(separator: " "))"])
        case AVAHI_ENTRY_GROUP_COLLISION:
            // Another machine has the name: take the next one and try again.
            takeAlternativeName()
            if let client = avahi_entry_group_get_client(group) { register(client) }
        case AVAHI_ENTRY_GROUP_FAILURE:
            let reason = avahi_entry_group_get_client(group).map { AvahiSession.lastError(of: $0) } ?? "unknown"
            logger.error("advertising \"\(name)\" on the network failed: \(reason)")
        default:
            break
        }
    }
}
