import CAtriumSystem
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What systemd hands a service it starts: sockets already listening (socket activation,
/// `LISTEN_FDS`), and a socket to tell it how the service is doing (`NOTIFY_SOCKET`, for
/// `Type=notify`). Both are read once, at start, and taken out of the environment, so that
/// nothing the host starts (worker processes, launch handlers) takes them for its own.
public enum Systemd {
    /// A listening socket systemd passed.
    public struct ActivatedSocket: Sendable, Equatable {
        public enum Kind: Sendable, Equatable {
            /// A TCP socket, with the address and port it is bound to.
            case tcp(address: String, port: Int)
            /// A Unix stream socket, with its path (`@name` for an abstract one).
            case unix(path: String)
        }

        public var descriptor: Int32
        public var kind: Kind
        /// Its name in the socket unit (`FileDescriptorName=`), if it has one.
        public var name: String?

        public var isTCP: Bool {
            if case .tcp = kind { return true }
            return false
        }
    }

    /// Why the sockets passed cannot be used.
    public struct ActivationError: Error, CustomStringConvertible, Equatable {
        public var description: String
    }

    /// The sockets passed by socket activation (`LISTEN_PID` naming this process,
    /// `LISTEN_FDS` of them from descriptor 3): at most one TCP socket and one Unix socket,
    /// each listening. Empty when none were passed. The variables are unset either way.
    public static func takeActivatedSockets() throws(ActivationError) -> [ActivatedSocket] {
        let environment = ProcessInfo.processInfo.environment
        defer {
            unsetenv("LISTEN_PID")
            unsetenv("LISTEN_FDS")
            unsetenv("LISTEN_FDNAMES")
        }
        guard let pid = environment["LISTEN_PID"], let count = environment["LISTEN_FDS"] else { return [] }
        guard Int32(pid) == getpid() else { return [] }  // meant for another process
        guard let count = Int32(count), count >= 0, count <= 16 else {
            throw ActivationError(description: "LISTEN_FDS is \"\(count)\", not a count of sockets")
        }
        let names = environment["LISTEN_FDNAMES"]?.split(separator: ":", omittingEmptySubsequences: false).map(
            String.init)
        var sockets: [ActivatedSocket] = []
        for index in 0..<count {
            let descriptor = 3 + index
            var path = [CChar](repeating: 0, count: 256)
            let name = names.flatMap { $0.indices.contains(Int(index)) ? $0[Int(index)] : nil }
            let label = "socket \(descriptor)" + (name.map { " (\($0))" } ?? "")
            switch atrium_listening_kind(descriptor, &path, Int32(path.count)) {
            case 1:
                let text = path.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
                let parts = text.split(separator: " ")
                sockets.append(
                    ActivatedSocket(
                        descriptor: descriptor,
                        kind: .tcp(
                            address: parts.first.map(String.init) ?? "", port: parts.last.flatMap { Int($0) } ?? 0),
                        name: name))
            case 2:
                let text = path.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
                sockets.append(ActivatedSocket(descriptor: descriptor, kind: .unix(path: text), name: name))
            case -1:
                let reason =
                    errno == ENOTSOCK ? "is not a socket" : "cannot be used: \(String(cString: strerror(errno)))"
                throw ActivationError(description: "\(label), passed by systemd, \(reason)")
            default:
                throw ActivationError(
                    description:
                        "\(label), passed by systemd, is not a listening TCP or Unix stream socket (ListenStream= in the socket unit)"
                )
            }
            _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        }
        if sockets.filter({ $0.isTCP }).count > 1 {
            throw ActivationError(description: "systemd passed more than one TCP socket; atriumd listens on one")
        }
        if sockets.filter({ !$0.isTCP }).count > 1 {
            throw ActivationError(description: "systemd passed more than one Unix socket; atriumd listens on one")
        }
        return sockets
    }

    /// Tells systemd how the service is doing, when it asked to be told (`NOTIFY_SOCKET`,
    /// `Type=notify`); does nothing otherwise.
    public final class Notifier: Sendable {
        let path: String

        /// The notifier for `NOTIFY_SOCKET`, or nil when it is not set (not run by systemd, or
        /// not as `Type=notify`). Unsets it.
        public static func fromEnvironment() -> Notifier? {
            defer { unsetenv("NOTIFY_SOCKET") }
            // sd_notify's addresses: a path, or an abstract socket's name after '@'.
            guard let path = ProcessInfo.processInfo.environment["NOTIFY_SOCKET"],
                path.hasPrefix("/") || path.hasPrefix("@")
            else { return nil }
            return Notifier(path: path)
        }

        init(path: String) { self.path = path }

        /// Sends `fields` (`READY=1`, `STATUS=...`), one per line. Returns whether it went.
        @discardableResult
        public func send(_ fields: [String]) -> Bool {
            // A status is one line: a newline in it would start a field of its own.
            let message = fields.map { $0.replacingOccurrences(of: "\n", with: " ") }.joined(separator: "\n")
            return atrium_notify(path, message) == 0
        }

        /// Says the host is ready; false when systemd could not be told (it then waits for
        /// its start timeout).
        @discardableResult
        public func ready(status: String) -> Bool {
            send(["READY=1", "STATUS=\(status)", "MAINPID=\(getpid())"])
        }
        public func stopping() { send(["STOPPING=1", "STATUS=shutting down"]) }
        public func status(_ status: String) { send(["STATUS=\(status)"]) }
    }
}
