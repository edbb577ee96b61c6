public import AtriumTLS
public import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The hosts this client has paired with, by address, and the identity each proved then
/// (CONTRACT section 7: a client remembers a host's identity on first pairing and refuses
/// a host that presents another later, as ssh's known_hosts does). Kept as
/// `known-hosts.json` (mode 0600) in the client's state folder.
public struct KnownHosts: Sendable {
    public let file: URL

    public init(folder: URL = TLSIdentity.defaultStateFolder()) {
        file = folder.appendingPathComponent("known-hosts.json")
    }

    /// Every known host: address (`host:port`) → identity.
    public func all() throws -> [String: String] {
        guard let data = FileManager.default.contents(atPath: file.path) else { return [:] }
        do {
            return try JSONDecoder().decode([String: String].self, from: data)
        } catch {
            throw AtriumClientError(
                .protocolError, "\(file.path) is not a list of known hosts (\(error)): fix it or remove it")
        }
    }

    /// The identity `endpoint` proved when this client paired with it, if it did.
    public func identity(of endpoint: AtriumEndpoint) throws -> String? {
        try all()[Self.key(endpoint)]
    }

    /// Whether this client paired with a host of `identity`, at any address (an unreadable
    /// file counts as no).
    public func isPaired(_ identity: String) -> Bool {
        (try? all().contains { !$0.key.hasPrefix("refused:") && $0.value == identity }) ?? false
    }

    /// The identity the host with id `hostId` (`welcome.hostId`) proved when this client
    /// paired with it, if it did: kept as `id:HOSTID`, so that a host found on the network is
    /// held to it whatever its address, name or advertised identity.
    public func identity(ofHostId hostId: String) -> String? {
        try? all()["id:" + hostId]
    }

    /// Remembers `identity` for the host with id `hostId` (after a pairing).
    public func remember(_ identity: String, forHostId hostId: String) throws {
        var hosts = try all()
        hosts["id:" + hostId] = identity
        hosts["refused:" + identity] = nil
        try save(hosts)
    }

    /// Remembers `identity` for `endpoint` (after a pairing).
    public func remember(_ identity: String, for endpoint: AtriumEndpoint) throws {
        var hosts = try all()
        hosts[Self.key(endpoint)] = identity
        try save(hosts)
    }

    /// The key an address is kept under: an IP address in its one canonical spelling, a name
    /// in lower case, then the port (`::1` and `0:0::1`, or `NAS.local` and `nas.local`, are
    /// then the same host).
    static func key(_ endpoint: AtriumEndpoint) -> String {
        guard case .tcp(let host, let port) = endpoint.address else { return endpoint.description }
        return AtriumEndpoint(.tcp(host: canonicalHost(host), port: port)).description
    }

    static func canonicalHost(_ host: String) -> String {
        var v4 = in_addr()
        var v6 = in6_addr()
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        if inet_pton(AF_INET, host, &v4) == 1, inet_ntop(AF_INET, &v4, &text, socklen_t(text.count)) != nil {
            return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        if inet_pton(AF_INET6, host, &v6) == 1, inet_ntop(AF_INET6, &v6, &text, socklen_t(text.count)) != nil {
            return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        return host.lowercased()
    }

    /// When the host of `identity` last refused this client although it paired with it (it
    /// revoked the pairing, or forgot it), if it did since the last pairing: what this client
    /// knows is then "paired here, refused there". Kept as `refused:IDENTITY`.
    public func refusedSince(_ identity: String) -> String? {
        try? all()["refused:" + identity]
    }

    /// Notes that the host of `identity`, which this client paired with, refused it (now);
    /// a later pairing with it clears the note (``remember(_:forHostId:)``).
    public func noteRefused(_ identity: String) throws {
        var hosts = try all()
        guard hosts.contains(where: { !$0.key.hasPrefix("refused:") && $0.value == identity }) else { return }
        hosts["refused:" + identity] = Date().formatted(.iso8601)
        try save(hosts)
    }

    /// Forgets `endpoint` (before pairing again with a host that made a new key on purpose);
    /// whether it was known.
    @discardableResult
    public func forget(_ endpoint: AtriumEndpoint) throws -> Bool {
        var hosts = try all()
        guard hosts.removeValue(forKey: Self.key(endpoint)) != nil else { return false }
        try save(hosts)
        return true
    }

    private func save(_ hosts: [String: String]) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        do {
            try FileManager.default.createDirectory(
                at: file.deletingLastPathComponent(), withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
            try TLSIdentity.writeNew(file, String(decoding: try encoder.encode(hosts), as: UTF8.self) + "\n")
        } catch {
            throw AtriumClientError(.protocolError, "cannot save the known hosts to \(file.path): \(error)")
        }
    }
}
