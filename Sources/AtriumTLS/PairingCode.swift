import Crypto

/// The verification code a pairing shows on both sides (CONTRACT section 7): six digits
/// derived from the two identities, so that a person can compare them, as Bluetooth's
/// numeric comparison does. A man in the middle would have to present identities of its
/// own to each side, and the two sides would then show different codes, unless it could
/// choose those identities to match: the nonces of a committed pairing take that away.
public enum PairingCode {
    /// The code of a committed pairing: SHA-256 over `atrium-pairing-v2`, then the host's
    /// identity, the client's identity, the client's nonce and the host's nonce (each as
    /// lowercase hex text), each after a NUL; its first four bytes, big-endian, modulo one
    /// million, written with six digits. The client commits to its nonce before it sees the
    /// host's, and the host sends its nonce before it sees the client's, so neither side, and
    /// no one in the middle, can steer the digits: a man in the middle is caught with
    /// probability 999,999 in a million.
    public static func between(host: String, client: String, clientNonce: String, hostNonce: String) -> String {
        digits(of: ["atrium-pairing-v2", host, client, clientNonce, hostNonce])
    }

    /// The commitment a client sends in `pair` for `nonce`: SHA-256 of
    /// `atrium-pairing-commit-v1`, a NUL and the nonce (lowercase hex text), in lowercase hex.
    public static func commitment(to nonce: String) -> String {
        hexString(SHA256.hash(data: Array("atrium-pairing-commit-v1".utf8) + [0] + Array(nonce.lowercased().utf8)))
    }

    /// 32 random bytes in lowercase hex: a pairing nonce.
    public static func makeNonce() -> String {
        randomHex(byteCount: 32)
    }

    /// Whether `text` is a nonce or commitment as sent: 64 lowercase hex digits.
    public static func isWellFormed(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    static func digits(of parts: [String]) -> String {
        var input: [UInt8] = []
        for (index, part) in parts.enumerated() {
            if index > 0 { input.append(0) }
            input += Array(part.lowercased().utf8)
        }
        let digest = Array(SHA256.hash(data: input))
        let number = digest.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) } % 1_000_000
        let digits = String(number)
        return String(repeating: "0", count: 6 - digits.count) + digits
    }

    /// The code of a pairing without a commitment (a client written from CONTRACT section 7
    /// alone): SHA-256 over `atrium-pairing-v1`, the host's identity and the client's, as
    /// above. Weaker: someone in the middle who can make a million keys in the pairing
    /// timeout can make the two codes match, and the host's log says so.
    public static func between(host: String, client: String) -> String {
        digits(of: ["atrium-pairing-v1", host, client])
    }
}
