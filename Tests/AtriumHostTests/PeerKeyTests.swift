import NIOCore
import Testing

@testable import AtriumHost

/// What the per-address connection limit counts a client as.
struct PeerKeyTests {
    @Test func ipv4IsItsAddressAndIPv6ItsSlash64() throws {
        #expect(ConnectionHandler.peerKey(try SocketAddress(ipAddress: "192.0.2.7", port: 1)) == "192.0.2.7")
        let a = ConnectionHandler.peerKey(try SocketAddress(ipAddress: "2001:db8:1:2:aaaa::1", port: 1))
        let b = ConnectionHandler.peerKey(try SocketAddress(ipAddress: "2001:db8:1:2:ffff:1:2:3", port: 1))
        let c = ConnectionHandler.peerKey(try SocketAddress(ipAddress: "2001:db8:1:3::1", port: 1))
        #expect(a == "2001:db8:1:2::/64" && a == b && a != c)
        #expect(ConnectionHandler.peerKey(try SocketAddress(ipAddress: "::ffff:192.0.2.7", port: 1)) == "192.0.2.7")
    }
}
