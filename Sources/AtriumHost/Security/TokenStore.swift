import AtriumTLS
import Crypto
public import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Tokens for scripts and servers (CONTRACT section 7), made by `atriumd token create`: each
/// has a name, may be scoped to some services, and is kept only as its SHA-256 in
/// `tokens.json` (mode 0600) in the state folder. A client that presents one in `hello` is
/// served as a paired device would be, within the token's services. The host reads the file
/// again when it changes, so a token revoked while the host runs stops working at once.
public final class TokenStore: Sendable {
    public struct Token: Codable, Sendable, Hashable {
        public var name: String
        /// SHA-256 of the token, lowercase hex.
        public var hash: String
        /// `PACKAGE/SERVICE` entries the token may open; nil for every service.
        public var services: [String]?
        public var created: Date
    }

    public let file: URL
    private struct Cache {
        var tokens: [Token] = []
        var stamp: [Int] = []
    }
    private let cache = Mutex(Cache())

    public init(folder: URL) {
        file = folder.appendingPathComponent("tokens.json")
    }

    /// Root managing the state folder of another user (the service's: `sudo atriumd token
    /// create` for the system unit, whose DynamicUser owns /var/lib/atrium): that user's
    /// files are read, and what is written is given to them, so the host can read it. Nil
    /// otherwise.
    private var folderOwner: (uid_t, gid_t)? {
        guard geteuid() == 0 else { return nil }
        var status = stat()
        guard lstat(file.deletingLastPathComponent().path, &status) == 0, status.st_mode & S_IFMT == S_IFDIR,
            status.st_uid != 0
        else { return nil }
        return (status.st_uid, status.st_gid)
    }

    /// The tokens, read again from the file when it has changed since the last look.
    public func tokens() throws -> [Token] {
        var status = stat()
        guard lstat(file.path, &status) == 0 else {
            cache.withLock { $0 = Cache() }
            return []
        }
        let stamp = [
            Int(status.st_ino), Int(status.st_size), Int(status.st_mtim.tv_sec), Int(status.st_mtim.tv_nsec),
        ]
        if let cached = cache.withLock({ $0.stamp == stamp ? $0.tokens : nil }) { return cached }
        let text = try TLSIdentity.readPrivate(file, owner: folderOwner?.0)
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let tokens = try decoder.decode([Token].self, from: Data(text.utf8))
        cache.withLock { $0 = Cache(tokens: tokens, stamp: stamp) }
        return tokens
    }

    /// The token `offered` is, or nil: compared by hash, in time that does not depend on
    /// where the hashes differ.
    public func match(_ offered: String) -> Token? {
        guard let tokens = try? tokens() else { return nil }
        let digest = Array(SHA256.hash(data: Array(offered.utf8)))
        var found: Token?
        for token in tokens {
            let stored = HostConfiguration.hexBytes(token.hash) ?? []
            var difference = UInt8(stored.count == digest.count ? 0 : 1)
            for index in 0..<min(stored.count, digest.count) { difference |= stored[index] ^ digest[index] }
            if difference == 0 { found = token }
        }
        return found
    }

    /// Makes a token named `name` (for `services`, or every service), keeps its hash, and
    /// returns it: the only time it is seen.
    public func create(name: String, services: [String]?) throws -> String {
        var tokens = try tokens()
        guard !tokens.contains(where: { $0.name == name }) else {
            throw TokenError("there is already a token named \"\(name)\"; revoke it first, or choose another name")
        }
        let secret = "atrium-" + randomHex(byteCount: 32)
        tokens.append(
            Token(
                name: name, hash: hexString(SHA256.hash(data: Array(secret.utf8))), services: services, created: Date())
        )
        try save(tokens)
        return secret
    }

    /// Removes the token named `name`; whether there was one.
    @discardableResult
    public func revoke(name: String) throws -> Bool {
        var tokens = try tokens()
        guard let index = tokens.firstIndex(where: { $0.name == name }) else { return false }
        tokens.remove(at: index)
        try save(tokens)
        return true
    }

    private func save(_ tokens: [Token]) throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let owner = folderOwner
        try TLSIdentity.prepareFolder(file.deletingLastPathComponent(), owner: owner?.0)
        try TLSIdentity.writeNew(
            file, String(decoding: try encoder.encode(tokens), as: UTF8.self) + "\n", owner: owner)
    }
}

/// Why a token could not be made or removed.
public struct TokenError: Error, Sendable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
