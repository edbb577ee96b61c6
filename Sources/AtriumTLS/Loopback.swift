#if canImport(Glibc)
    import Glibc
#endif

/// Whether a host, as written, is this machine's loopback: an IPv4 literal in 127.0.0.0/8,
/// the IPv6 literal ::1 (in any spelling), an IPv4-mapped 127.x.x.x, or the name
/// `localhost`. Only literals and that one name: a name that merely starts with "127." may
/// resolve anywhere.
public func isLoopbackHost(_ host: String) -> Bool {
    if host == "localhost" { return true }
    var v4 = in_addr()
    if inet_pton(AF_INET, host, &v4) == 1 {
        return UInt32(bigEndian: v4.s_addr) >> 24 == 127
    }
    var v6 = in6_addr()
    guard inet_pton(AF_INET6, host, &v6) == 1 else { return false }
    let bytes = withUnsafeBytes(of: v6) { Array($0) }
    if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true }
    return bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xff && bytes[11] == 0xff && bytes[12] == 127
}
