/// What the first bytes of a TLS connection say about the application protocols its client
/// offers (ALPN, RFC 7301): read before the handshake, so that the host can answer with the
/// TLS settings of that protocol (frames ask for a client certificate; HTTP does not). Only the
/// ClientHello's framing is read, never trusted for more than the choice: a ClientHello that
/// does not parse is left to TLS, which refuses it.
public enum ClientHello: Equatable, Sendable {
    /// The bytes so far end before the ClientHello does.
    case incomplete
    /// A whole ClientHello, and the protocols its ALPN extension names (empty without one).
    case offers([String])
    /// Not a ClientHello that parses (or one larger than ``maxBytes``).
    case unreadable

    /// The most bytes read to find the ClientHello's end: a real one is a few hundred bytes,
    /// a few thousand with post-quantum key shares.
    public static let maxBytes = 32 * 1024

    /// The record type of a handshake record, and the message type of a ClientHello.
    static let handshakeRecord: UInt8 = 0x16
    static let clientHelloMessage: UInt8 = 1
    static let alpnExtension = 16

    /// Reads `bytes`, the first bytes a client sent.
    public static func peek(_ bytes: some Collection<UInt8>) -> ClientHello {
        // The handshake message may be cut into several records: their contents, joined.
        var message: [UInt8] = []
        var records = Reader(Array(bytes.prefix(maxBytes + 1)))
        while true {
            guard records.remaining >= 5 else { return bytes.count > maxBytes ? .unreadable : .incomplete }
            guard let type = records.byte(), type == handshakeRecord, records.skip(2), let length = records.int(2),
                length > 0
            else { return .unreadable }
            guard let fragment = records.bytes(length) else {
                return bytes.count > maxBytes ? .unreadable : .incomplete
            }
            message += fragment
            guard message.count >= 4 else { continue }
            guard message[0] == clientHelloMessage else { return .unreadable }
            let size = Int(message[1]) << 16 | Int(message[2]) << 8 | Int(message[3])
            guard 4 + size <= maxBytes else { return .unreadable }
            if message.count >= 4 + size {
                return parse(Array(message[4..<(4 + size)])).map { .offers($0) } ?? .unreadable
            }
        }
    }

    /// The ALPN names of a ClientHello's body, or nil when it does not parse.
    static func parse(_ body: [UInt8]) -> [String]? {
        var hello = Reader(body)
        // Version, random, session id, cipher suites, compression methods.
        guard hello.skip(2 + 32), let session = hello.int(1), hello.skip(session), let suites = hello.int(2),
            hello.skip(suites), let methods = hello.int(1), hello.skip(methods)
        else { return nil }
        // No extensions at all is a ClientHello of old, without ALPN.
        if hello.remaining == 0 { return [] }
        guard let length = hello.int(2), let extensions = hello.bytes(length), hello.remaining == 0 else { return nil }
        var list = Reader(Array(extensions))
        var names: [String] = []
        while list.remaining > 0 {
            guard let type = list.int(2), let size = list.int(2), let data = list.bytes(size) else { return nil }
            guard type == alpnExtension else { continue }
            var alpn = Reader(Array(data))
            guard let total = alpn.int(2), total == alpn.remaining, total > 0 else { return nil }
            while alpn.remaining > 0 {
                guard let count = alpn.int(1), count > 0, let name = alpn.bytes(count) else { return nil }
                names.append(String(decoding: name, as: UTF8.self))
            }
        }
        return names
    }

    /// Reads big-endian fields from bytes, never past their end.
    struct Reader {
        let bytes: [UInt8]
        var index = 0
        init(_ bytes: [UInt8]) { self.bytes = bytes }
        var remaining: Int { bytes.count - index }

        mutating func byte() -> UInt8? {
            guard remaining >= 1 else { return nil }
            defer { index += 1 }
            return bytes[index]
        }

        mutating func int(_ width: Int) -> Int? {
            guard remaining >= width else { return nil }
            var value = 0
            for offset in 0..<width { value = value << 8 | Int(bytes[index + offset]) }
            index += width
            return value
        }

        mutating func skip(_ count: Int) -> Bool {
            guard count >= 0, remaining >= count else { return false }
            index += count
            return true
        }

        mutating func bytes(_ count: Int) -> ArraySlice<UInt8>? {
            guard count >= 0, remaining >= count else { return nil }
            defer { index += count }
            return bytes[index..<(index + count)]
        }
    }
}
