import Crypto

/// The verification code a pairing shows on both sides (CONTRACT section 7): six digits
/// derived from the two identities, so that a person can compare them, as Bluetooth's
/// numeric comparison does. A man in the middle would have to present identities of its
/// own to each side, and the two sides would then show different codes.
public enum PairingCode {
    /// SHA-256 over `atrium-pairing-v1`, a NUL, the host's identity, a NUL and the client's
    /// identity (each as lowercase hex text); its first four bytes, big-endian, modulo one
    /// million, written with six digits.
    public static func between(host: String, client: String) -> String {
        var input = Array("atrium-pairing-v1".utf8)
        input.append(0)
        input += Array(host.lowercased().utf8)
        input.append(0)
        input += Array(client.lowercased().utf8)
        let digest = Array(SHA256.hash(data: input))
        let number = digest.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) } % 1_000_000
        let digits = String(number)
        return String(repeating: "0", count: 6 - digits.count) + digits
    }
}
