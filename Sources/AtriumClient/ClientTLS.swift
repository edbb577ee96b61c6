public import AtriumTLS
public import Foundation

/// TLS for a TCP connection (CONTRACT section 7): the client's own identity, presented to
/// the host, and the host's identity when it is known (pinned): a host that presents any
/// other is refused, with both identities in the error.
public struct ClientTLS: Sendable {
    public var identity: TLSIdentity
    public var expectedHostIdentity: String?

    public init(identity: TLSIdentity, expectedHostIdentity: String? = nil) {
        self.identity = identity
        self.expectedHostIdentity = expectedHostIdentity
    }

    /// The known hosts kept beside this client's identity.
    var knownHosts: KnownHosts { KnownHosts(folder: identity.keyFile.deletingLastPathComponent()) }

    /// The identity kept in `$XDG_STATE_HOME/atrium` (or `~/.local/state/atrium`) as
    /// `client-key.pem` and `client-cert.pem`, made there at first use.
    public static func defaultIdentity(in folder: URL? = nil) throws -> TLSIdentity {
        let folder = folder ?? TLSIdentity.defaultStateFolder()
        return try TLSIdentity.loadOrCreate(
            in: folder, name: "client", commonName: "atrium client on \(ProcessInfo.processInfo.hostName)")
    }
}
