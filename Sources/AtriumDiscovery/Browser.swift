import CAvahi
public import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Browses DNS-SD for one service type through avahi-daemon and resolves every instance it
/// finds, keeping each resolver open so that a changed record (a new port, a new TXT
/// record) is reported again. Survives avahi-daemon restarts: it reports the instances of
/// the lost daemon removed, then browses again.
public final class DNSSDBrowser: @unchecked Sendable {
    /// One instance as Avahi reports it: per interface and per address family.
    public struct Item: Sendable, Hashable {
        public var interface: Int32
        public var ipv6: Bool
        public var name: String
        public var domain: String

        public init(interface: Int32, ipv6: Bool, name: String, domain: String) {
            self.interface = interface
            self.ipv6 = ipv6
            self.name = name
            self.domain = domain
        }
    }

    /// What an instance resolved to.
    public struct Resolution: Sendable, Hashable {
        public var hostName: String
        /// The address as text; an IPv6 link-local one carries its interface (`fe80::1%eth0`).
        public var address: String
        public var port: Int
        public var txt: [String: String]

        public init(hostName: String, address: String, port: Int, txt: [String: String]) {
            self.hostName = hostName
            self.address = address
            self.port = port
            self.txt = txt
        }
    }

    public enum Event: Sendable {
        case resolved(Item, Resolution)
        case removed(Item)
        /// Avahi is not reachable (with the reason), or is again (nil).
        case unavailable(String?)
    }

    /// The most instances resolved at once.
    public static let maxInstances = 256

    private let type: String
    private let handler: @Sendable (Event) -> Void
    /// Touched on Avahi's thread with the lock held, or under ``AvahiSession/locked(_:)``.
    private var browser: OpaquePointer?
    private var resolvers: [Item: OpaquePointer] = [:]
    /// Instances announced while every slot was taken, in order.
    private var waiting: [Item] = []
    /// Set once, at the end of init.
    private var link: AvahiLink!
    /// Whether `.unavailable` with a reason was the last said (only then is "available
    /// again" news). Touched on Avahi's thread and the queue, one at a time.
    private let saidUnavailable = Mutex(false)

    /// `handler` is called on Avahi's thread: it must not block, nor call back into this browser.
    public init(
        type: String, retryInterval: DispatchTimeInterval = .seconds(5), handler: @escaping @Sendable (Event) -> Void
    ) {
        self.type = type
        self.handler = handler
        link = AvahiLink(
            label: "atrium.dnssd.browser", retryInterval: retryInterval,
            stateChanged: { [weak self] client, state in self?.clientChanged(client, state) },
            unreachable: { [weak self] error in self?.report("\(error)") })
    }

    /// Starts browsing; a missing avahi-daemon is reported as `.unavailable` and waited for.
    public func start() {
        link.start()
    }

    /// Stops browsing. Returns once no more events come.
    public func stop() {
        link.stop { _ in
            browser = nil
            resolvers = [:]
            waiting = []
        }
    }

    /// On Avahi's thread, lock held.
    private func clientChanged(_ client: OpaquePointer, _ state: AvahiClientState) {
        switch state {
        case AVAHI_CLIENT_S_RUNNING:
            guard browser == nil else { return }
            if saidUnavailable.withLock({ $0 }) { report(nil) }
            browser = avahi_service_browser_new(
                client, Int32(AVAHI_IF_UNSPEC), Int32(AVAHI_PROTO_UNSPEC), type, nil, AvahiLookupFlags(0),
                { _, interface, family, event, name, _, domain, _, userdata in
                    guard let userdata, let name, let domain else { return }
                    let item = Item(
                        interface: interface, ipv6: family == Int32(AVAHI_PROTO_INET6), name: String(cString: name),
                        domain: String(cString: domain))
                    Unmanaged<DNSSDBrowser>.fromOpaque(userdata).takeUnretainedValue().browsed(item, event)
                }, Unmanaged.passUnretained(self).toOpaque())
            if browser == nil {
                report("cannot browse for \(type): \(AvahiSession.lastError(of: client))")
            }
        case AVAHI_CLIENT_CONNECTING:
            report("avahi-daemon is not running")
        case AVAHI_CLIENT_FAILURE:
            let reason = AvahiSession.lastError(of: client)
            for item in resolvers.keys { handler(.removed(item)) }
            resolvers = [:]
            waiting = []
            browser = nil
            report("lost avahi-daemon (\(reason))")  // the link connects again
        default:
            break
        }
    }

    private func report(_ reason: String?) {
        saidUnavailable.withLock { $0 = reason != nil }
        handler(.unavailable(reason))
    }

    /// On Avahi's thread, lock held.
    private func browsed(_ item: Item, _ event: AvahiBrowserEvent) {
        switch event {
        case AVAHI_BROWSER_NEW:
            guard resolvers[item] == nil, !waiting.contains(item) else { return }
            // Anyone on the network can announce instances: past this many, new ones wait for
            // a free slot (and past that many more, are left out), so that a flood costs a
            // bounded number of resolvers and a real host announced later is still resolved
            // once the flood is gone.
            guard resolvers.count < Self.maxInstances else {
                if waiting.count < Self.maxInstances * 4 { waiting.append(item) }
                return
            }
            resolve(item)
        case AVAHI_BROWSER_REMOVE:
            waiting.removeAll { $0 == item }
            if let resolver = resolvers.removeValue(forKey: item) {
                avahi_service_resolver_free(resolver)
                handler(.removed(item))
                resolveWaiting()
            }
        default:
            break
        }
    }

    /// Starts a resolver for `item`, kept open: Avahi reports the instance again whenever its
    /// records change. On Avahi's thread, lock held.
    private func resolve(_ item: Item) {
        guard let browser, let client = avahi_service_browser_get_client(browser) else { return }
        let family = item.ipv6 ? Int32(AVAHI_PROTO_INET6) : Int32(AVAHI_PROTO_INET)
        let resolver = avahi_service_resolver_new(
            client, item.interface, family, item.name, type, item.domain, family, AvahiLookupFlags(0),
            { _, interface, family, event, name, _, domain, hostName, address, port, txt, _, userdata in
                guard let userdata, let name, let domain else { return }
                let browser = Unmanaged<DNSSDBrowser>.fromOpaque(userdata).takeUnretainedValue()
                let item = Item(
                    interface: interface, ipv6: family == Int32(AVAHI_PROTO_INET6), name: String(cString: name),
                    domain: String(cString: domain))
                guard event == AVAHI_RESOLVER_FOUND, let address else {
                    // Unresolvable (no address, no SRV record): its slot goes to the next.
                    browser.dropResolver(item)
                    return
                }
                let resolution = Resolution(
                    hostName: hostName.map { String(cString: $0) } ?? "",
                    address: DNSSDBrowser.text(of: address, interface: interface), port: Int(port),
                    txt: DNSSDBrowser.pairs(of: txt))
                browser.handler(.resolved(item, resolution))
            }, Unmanaged.passUnretained(self).toOpaque())
        if let resolver { resolvers[item] = resolver }
    }

    /// On Avahi's thread, lock held (from the resolver's own callback, where Avahi allows
    /// freeing it).
    private func dropResolver(_ item: Item) {
        guard let resolver = resolvers.removeValue(forKey: item) else { return }
        avahi_service_resolver_free(resolver)
        handler(.removed(item))
        resolveWaiting()
    }

    private func resolveWaiting() {
        while resolvers.count < Self.maxInstances, !waiting.isEmpty { resolve(waiting.removeFirst()) }
    }

    static func text(of address: UnsafePointer<AvahiAddress>, interface: Int32) -> String {
        var buffer = [CChar](repeating: 0, count: Int(AVAHI_ADDRESS_STR_MAX) + 1)
        avahi_address_snprint(&buffer, buffer.count, address)
        let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        // A link-local IPv6 address means nothing without its interface.
        if address.pointee.proto == Int32(AVAHI_PROTO_INET6), text.lowercased().hasPrefix("fe80:"), interface > 0 {
            var name = [CChar](repeating: 0, count: 32)
            if if_indextoname(UInt32(interface), &name) != nil {
                return text + "%"
                    + String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            }
        }
        return text
    }

    /// A TXT record as key/value pairs (a key without `=` has the empty value; the first of
    /// two equal keys wins, RFC 6763 section 6.4).
    static func pairs(of list: UnsafeMutablePointer<AvahiStringList>?) -> [String: String] {
        var pairs: [String: String] = [:]
        var entry = list
        while let current = entry {
            let size = Int(current.pointee.size)
            let bytes = withUnsafePointer(to: &current.pointee.text) {
                UnsafeRawPointer($0).withMemoryRebound(to: UInt8.self, capacity: size) {
                    Array(UnsafeBufferPointer(start: $0, count: size))
                }
            }
            if let equals = bytes.firstIndex(of: UInt8(ascii: "=")) {
                let key = String(decoding: bytes[..<equals], as: UTF8.self).lowercased()
                if !key.isEmpty, pairs[key] == nil {
                    pairs[key] = String(decoding: bytes[(equals + 1)...], as: UTF8.self)
                }
            } else if !bytes.isEmpty {
                let key = String(decoding: bytes, as: UTF8.self).lowercased()
                if pairs[key] == nil { pairs[key] = "" }
            }
            entry = current.pointee.next
        }
        return pairs
    }
}
