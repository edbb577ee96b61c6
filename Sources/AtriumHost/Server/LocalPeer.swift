import Foundation
import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// Who is at the other end of the local socket, from the kernel (SO_PEERCRED), and whether
/// that one may use it: the host's own user, root, or a member of the group the operator
/// named (`--socket-group`). Checked on every local connection, whatever the socket's and its
/// folder's modes are.
struct LocalPeer: Sendable {
    /// Linux's `struct ucred`.
    struct Credentials: Sendable {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
    }

    /// The group whose members may use the socket too, if the operator named one.
    let group: gid_t?

    /// The peer's credentials, or nil when the kernel does not say.
    static func credentials(of channel: any Channel) -> Credentials? {
        guard channel.eventLoop.inEventLoop, let provider = channel as? any SocketOptionProvider else { return nil }
        // SO_PEERCRED is 17 on Linux; Swift's Glibc module does not export it. On the
        // channel's own loop the future is complete when it is returned.
        let future: EventLoopFuture<Credentials> = provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(17))
        var result: Credentials?
        future.assumeIsolated().whenSuccess { result = $0 }
        return result
    }

    /// Why `credentials` may not use the socket, or nil when they may.
    func refusal(of credentials: Credentials?) -> String? {
        guard let credentials else { return "the local socket could not tell who connected" }
        let uid = credentials.uid
        if uid == geteuid() || uid == 0 { return nil }
        if let group, Self.isMember(uid: uid, gid: credentials.gid, of: group) { return nil }
        return
            "the local socket takes only the host's user (uid \(geteuid()))\(group.map { " and the members of group \($0)" } ?? ""); uid \(uid) is neither"
    }

    static func isMember(uid: UInt32, gid: UInt32, of group: gid_t) -> Bool {
        if gid == group { return true }
        guard let entry = getpwuid(uid), let name = entry.pointee.pw_name else { return false }
        var count: Int32 = 64
        var groups = [gid_t](repeating: 0, count: Int(count))
        if getgrouplist(name, entry.pointee.pw_gid, &groups, &count) < 0 {
            groups = [gid_t](repeating: 0, count: Int(count))
            guard getgrouplist(name, entry.pointee.pw_gid, &groups, &count) >= 0 else { return false }
        }
        return groups.prefix(Int(count)).contains(group)
    }
}
