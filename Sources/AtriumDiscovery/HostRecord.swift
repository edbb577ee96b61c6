/// What a host says about itself in its DNS-SD TXT record (docs/DISCOVERY.md): public facts
/// only, that a client needs before it connects. Nothing in it is secret, and nothing in it is
/// trusted: the TLS identity is checked by the handshake, not by this record.
public struct HostRecord: Sendable, Hashable {
    /// The DNS-SD service type Atrium hosts advertise.
    public static let serviceType = "_atrium._tcp"
    /// The version of this record's layout (`txtvers`, RFC 6763 section 6.7).
    public static let recordVersion = 1

    /// The protocol version the host speaks (`protovers`), as in `welcome`.
    public var protocolVersion: Int
    /// The host's id (`id`): the app-specific machine id that `welcome` carries as `hostId`.
    public var hostId: String
    /// What kind of machine it is (`kind`): systemd's chassis names (``MachineKind``).
    public var kind: String
    /// Whether the listener takes only TLS (`tls=required`) or plain TCP too (`tls=optional`).
    public var tlsRequired: Bool
    /// Whether a client must pair before it may open services (`pairing=required` or `off`).
    public var pairingRequired: Bool
    /// The host's TLS identity (`identity`: SHA-256 of its public key, lowercase hex), when it
    /// serves TLS. A client that paired with this identity knows the host by it wherever the
    /// host's address moves; the handshake proves it.
    public var identity: String?

    public init(
        protocolVersion: Int = 1, hostId: String, kind: String, tlsRequired: Bool, pairingRequired: Bool,
        identity: String?
    ) {
        self.protocolVersion = protocolVersion
        self.hostId = hostId
        self.kind = kind
        self.tlsRequired = tlsRequired
        self.pairingRequired = pairingRequired
        self.identity = identity
    }

    /// The TXT record's key/value pairs, `txtvers` first (RFC 6763 section 6.7 asks for it).
    public var txt: [(key: String, value: String)] {
        var pairs: [(String, String)] = [
            ("txtvers", "\(Self.recordVersion)"), ("protovers", "\(protocolVersion)"), ("id", hostId), ("kind", kind),
            ("tls", tlsRequired ? "required" : "optional"), ("pairing", pairingRequired ? "required" : "off"),
        ]
        if let identity { pairs.append(("identity", identity)) }
        return pairs
    }

    /// Reads a TXT record (keys are case-insensitive, RFC 6763 section 6.4); nil when it is
    /// not an Atrium host's: no `id`, or a `txtvers` this client does not know. Values it does
    /// not understand are read as the safe choice (TLS and pairing required, kind unknown).
    public init?(txt: [String: String]) {
        var fields: [String: String] = [:]
        for (key, value) in txt { fields[key.lowercased()] = value }
        if let version = fields["txtvers"], version != "\(Self.recordVersion)" { return nil }
        // An id is letters, digits and '-' (a UUID from Atrium hosts): nothing a terminal or a
        // file name could take for more.
        guard let id = fields["id"], !id.isEmpty, id.utf8.count <= 64,
            id.utf8.allSatisfy({
                $0 == UInt8(ascii: "-") || (48...57).contains($0) || (65...90).contains($0) || (97...122).contains($0)
            })
        else { return nil }
        hostId = id
        protocolVersion = fields["protovers"].flatMap { Int($0) } ?? 1
        kind = fields["kind"].flatMap { MachineKind.isValid($0) ? $0 : nil } ?? MachineKind.unknown
        tlsRequired = fields["tls"] != "optional"
        pairingRequired = fields["pairing"] != "off"
        identity = fields["identity"].flatMap { text in
            text.utf8.count == 64 && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
                ? text : nil
        }
    }
}
