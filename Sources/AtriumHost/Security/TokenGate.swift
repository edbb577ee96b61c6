import Foundation
import Synchronization

/// The tokens a client may come with (`hello.token`): those of `atriumd token` (named, each
/// covering some services or all) and those of `--token-file`; checking one, and noticing
/// when one a client came with is revoked. Thread-safe.
final class TokenGate: Sendable {
    /// The tokens of `atriumd token`, in the state folder.
    let store: TokenStore
    /// The tokens of `--token-file`, if the host has one.
    private let fileTokens: Set<String>?

    init(store: TokenStore, fileTokens: Set<String>?) {
        self.store = store
        self.fileTokens = fileTokens
    }

    /// What a token in `hello` is: nothing (none sent), a token of `atriumd token` (with its
    /// name and services), or one of `--token-file` (every service).
    enum Verdict {
        case none
        case managed(TokenStore.Token)
        case fromFile
    }

    /// What `token` (the one in `hello`) is, or why the client is refused. With no tokens
    /// configured, a client that sends one is refused: the host cannot check it and must not
    /// pretend it did. With tokens, a TCP client must send one of them; a local client (the
    /// Unix socket, the host's own user) needs none, but one it sends must be right.
    func check(_ token: String?, isLocal: Bool) -> Result<Verdict, Refusal> {
        if let token {
            if let managed = store.match(token) { return .success(.managed(managed)) }
            if fileTokens == nil {
                // Once `atriumd token` has been used (its file exists, even emptied by
                // revocations), a token that matches none is one that is unknown or revoked.
                return .failure(
                    Refusal(
                        reason: FileManager.default.fileExists(atPath: store.file.path)
                            ? "the token is not valid on this host (unknown, or revoked)"
                            : "this host has no tokens (atriumd token create, or --token-file), so it cannot check the one sent; connect without a token"
                    ))
            }
        }
        if let refusal = tokenRefusal(token, isLocal: isLocal) { return .failure(Refusal(reason: refusal)) }
        return .success(token == nil ? .none : .fromFile)
    }

    struct Refusal: Error {
        var reason: String
    }

    /// The tokens' names at the last look for revoked ones, and those clients came with since.
    private let knownTokens = Mutex<Set<String>>([])

    /// A client came with the token `name`: its revocation must be noticed.
    func note(_ name: String) {
        knownTokens.withLock { _ = $0.insert(name) }
    }

    /// The tokens' names now, when a token a client came with is no longer among them
    /// (revoked while the host runs); nil when none is gone since the last look.
    func revokedSinceLastLook() -> Set<String>? {
        guard let names = try? Set(store.tokens().map(\.name)) else { return nil }
        // Only when a token is gone since the last look: the connections are left alone else.
        let gone = knownTokens.withLock { known in
            defer { known = names }
            return !known.isSubset(of: names)
        }
        return gone ? names : nil
    }

    /// Why `--token-file` refuses the client, or nil (a host without one has nothing to refuse
    /// here: ``check(_:isLocal:)`` has answered a token it cannot check).
    private func tokenRefusal(_ token: String?, isLocal: Bool) -> String? {
        guard let tokens = fileTokens else { return nil }
        guard let token else {
            return isLocal ? nil : "this host requires a token in hello (ask its operator for one)"
        }
        // Compare with every token, in time that does not depend on where they differ.
        var matched = false
        let offered = Array(token.utf8)
        for candidate in tokens {
            let expected = Array(candidate.utf8)
            var difference = UInt8(expected.count == offered.count ? 0 : 1)
            for index in 0..<min(expected.count, offered.count) { difference |= expected[index] ^ offered[index] }
            matched = matched || difference == 0
        }
        return matched ? nil : "the token is not valid on this host"
    }
}
