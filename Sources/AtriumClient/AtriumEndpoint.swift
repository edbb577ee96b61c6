import AtriumProtocol
import AtriumTLS
import Foundation

/// Where a host listens: `host:port` (TCP, a remote client), a bare `host` (port 7340), or
/// `unix:/path/to/atriumd.sock` (the host's local socket).
public struct AtriumEndpoint: Sendable, Hashable, LosslessStringConvertible {
    public enum Address: Sendable, Hashable {
        case tcp(host: String, port: Int)
        case unix(path: String)
    }

    public var address: Address

    public init(_ address: Address) { self.address = address }

    /// Parses `host:port`, `host`, `[::1]:7340`, `unix:/path`, or `unix:` alone (the host's
    /// default local socket, ``defaultLocalSocket``); nil for anything else.
    public init?(_ text: String) {
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst("unix:".count))
            address = .unix(path: path.isEmpty ? defaultLocalSocketPath() : path)
            return
        }
        var host = text
        var port = 7340
        if let colon = text.lastIndex(of: ":"), !text.hasSuffix("]") {
            guard let parsed = Int(text[text.index(after: colon)...]), (1...65535).contains(parsed) else { return nil }
            port = parsed
            host = String(text[..<colon])
        }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty, !host.contains(where: { "/= ".contains($0) }) else { return nil }
        address = .tcp(host: host, port: port)
    }

    public var description: String {
        switch address {
        case .tcp(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        case .unix(let path): "unix:\(path)"
        }
    }

    /// The host's local socket where atriumd puts it by default: `$XDG_RUNTIME_DIR/atrium/atriumd.sock`,
    /// or `/tmp/atrium-UID/atriumd.sock` without it.
    public static var defaultLocalSocket: AtriumEndpoint { AtriumEndpoint(.unix(path: defaultLocalSocketPath())) }

    /// Whether the host is on this machine: the Unix socket, or a loopback TCP address
    /// (127.0.0.0/8, ::1, localhost).
    public var isLoopback: Bool {
        switch address {
        case .tcp(let host, _): isLoopbackHost(host)
        case .unix: true
        }
    }
}
