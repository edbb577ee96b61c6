import AtriumDiscovery
import AtriumTLS
import Logging
import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

extension AtriumServer {
    /// The DNS-SD advertiser for the TCP listener bound at `address`, or nil, with the reason
    /// logged, when the host is not to be found on the network: `--advertise off`, no TCP
    /// listener, or one on loopback only.
    func makeAdvertiser(for address: SocketAddress?) -> DNSSDAdvertiser? {
        guard let host = configuration.listenHost, let port = address?.port else { return nil }
        guard configuration.advertise else {
            logger.info("not advertised on the network (--advertise off)")
            return nil
        }
        guard !configuration.listensOnLoopbackOnly else {
            logger.info(
                "not advertised on the network: the TCP listener is on loopback only (\(host)); --listen 0.0.0.0:\(port) makes the host reachable, and discoverable"
            )
            return nil
        }
        let (interface, ipv6) = Self.advertisingScope(of: host)
        return DNSSDAdvertiser(advertisedService(port: port, interface: interface, ipv6: ipv6), logger: logger)
    }

    /// What the host advertises: its name, port and TXT record (docs/DISCOVERY.md).
    func advertisedService(port: Int, interface: Int32?, ipv6: Bool?) -> DNSSDAdvertiser.Service {
        let record = HostRecord(
            hostId: configuration.hostId, kind: configuration.kind,
            tlsRequired: transport.context != nil && !transport.plaintextAllowed,
            pairingRequired: core.pairingRequired, identity: core.identity)
        return DNSSDAdvertiser.Service(
            name: configuration.advertisedName ?? MachineKind.prettyHostname(), type: HostRecord.serviceType,
            port: port, txt: record.txt.map { "\($0.key)=\($0.value)" }, interface: interface, ipv6: ipv6)
    }

    /// Where a listener bound to `host` is reachable: every interface for a wildcard address
    /// (IPv4 only for 0.0.0.0), else the interface that has the address.
    static func advertisingScope(of host: String) -> (interface: Int32?, ipv6: Bool?) {
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            return (
                v4.s_addr == 0
                    ? nil
                    : interfaceIndex { address in
                        guard address.pointee.sa_family == sa_family_t(AF_INET) else { return false }
                        return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                            $0.pointee.sin_addr.s_addr == v4.s_addr
                        }
                    }, false
            )
        }
        if inet_pton(AF_INET6, host, &v6) == 1 {
            let any = withUnsafeBytes(of: &v6) { $0.allSatisfy { $0 == 0 } }
            return (
                any
                    ? nil
                    : interfaceIndex { address in
                        guard address.pointee.sa_family == sa_family_t(AF_INET6) else { return false }
                        return address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { candidate in
                            withUnsafeBytes(of: candidate.pointee.sin6_addr) { a in
                                withUnsafeBytes(of: v6) { a.elementsEqual($0) }
                            }
                        }
                    }, any ? nil : true
            )
        }
        return (nil, nil)
    }

    private static func interfaceIndex(where matches: (UnsafeMutablePointer<sockaddr>) -> Bool) -> Int32? {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return nil }
        defer { freeifaddrs(list) }
        var entry = list
        while let current = entry {
            if let address = current.pointee.ifa_addr, matches(address) {
                let index = if_nametoindex(current.pointee.ifa_name)
                return index == 0 ? nil : Int32(index)
            }
            entry = current.pointee.ifa_next
        }
        return nil
    }
}
