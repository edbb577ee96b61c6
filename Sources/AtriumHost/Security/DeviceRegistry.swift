import AtriumProtocol
import AtriumTLS
public import Foundation
public import Logging
import Synchronization

/// The devices this host has paired with (kept in the state folder as `devices.json`, mode
/// 0600), and the pairing requests waiting for its operator (kept in memory only: a request
/// lives as long as the connection that made it, and at most the pairing timeout).
public final class DeviceRegistry: Sendable {
    /// A paired device.
    public struct Device: Codable, Sendable, Hashable {
        /// Its identity: the SHA-256 of its certificate's SubjectPublicKeyInfo, hex.
        public var identity: String
        /// The name it gave when it asked to pair (its own words: shown, never trusted).
        public var name: String
        public var pairedAt: Date
        public var lastSeen: Date
        /// The address it last connected from.
        public var lastAddress: String?
    }

    /// A request waiting for the operator.
    public struct Request: Sendable {
        /// The number the operator accepts or refuses it by.
        public let number: UInt64
        public let identity: String
        public let deviceName: String
        public let address: String
        /// The verification code the device shows too.
        public let code: String
        public let requested: Date
        /// Tells the requesting connection the outcome (on its own event loop).
        let answer: @Sendable (PairingStatus, String?) -> Void
    }

    struct State {
        var devices: [String: Device] = [:]
        var pending: [UInt64: Request] = [:]
        var next: UInt64 = 1
        /// When recent pairing attempts began, by address (an IPv6 address's /64), for each
        /// address's share.
        var attemptsByAddress: [String: [Date]] = [:]
        /// When recent pairing requests reached the operator (host-wide), for the rate limit.
        var filed: [Date] = []
        /// Set when `devices.json` could not be read: nothing is written over it then.
        var unreadable: String?
        /// When `devices.json` was last written, so that `lastSeen` alone rewrites it at most
        /// once a minute.
        var lastWrite = Date.distantPast
    }

    /// At most this many requests wait at once: a flood of them from the network must not
    /// bury the one the operator is looking for, nor hold memory.
    public static let maxPending = 16
    /// At most this many from one address.
    public static let maxPendingPerAddress = 2
    /// At most this many pairing requests reach the operator per minute, host-wide: each is
    /// one try at matching a verification code, and each puts a line in the log. Counted only
    /// once a request reaches the operator, so that attempts that never do (a commitment whose
    /// nonce is never revealed) cannot shut pairing for everyone.
    public static let maxAttemptsPerMinute = 20
    /// At most this many pairing attempts begin per minute from one address (an IPv6
    /// address's /64): one stranger cannot use up the host-wide budget.
    public static let maxAttemptsPerAddressPerMinute = 5
    /// The most addresses whose attempts are counted at once.
    static let maxAddressesCounted = 4096

    let file: URL
    let logger: Logger
    private let state: Mutex<State>

    /// Reads `devices.json` in `folder`. A file that cannot be read leaves no device paired
    /// (which refuses, rather than admits, the devices it named), and the log says why.
    public init(folder: URL, logger: Logger) {
        file = folder.appendingPathComponent("devices.json")
        self.logger = logger
        var initial = State()
        if let data = FileManager.default.contents(atPath: file.path) {
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            do {
                for device in try decoder.decode([Device].self, from: data) {
                    initial.devices[device.identity] = device
                }
            } catch {
                initial.unreadable = "\(error)"
                logger.error(
                    "\(file.path) cannot be read, so no device is paired (and none can be) until it is fixed or removed: \(error)"
                )
            }
        }
        state = Mutex(initial)
    }

    /// Whether `identity` is a paired device.
    public func isPaired(_ identity: String) -> Bool {
        state.withLock { $0.devices[identity] != nil }
    }

    /// A paired device connected again.
    func seen(_ identity: String, from address: String) {
        let due = state.withLock { state -> Bool in
            let now = Date()
            guard state.devices[identity] != nil else { return false }
            state.devices[identity]!.lastSeen = now
            state.devices[identity]!.lastAddress = address
            guard now.timeIntervalSince(state.lastWrite) > 60 else { return false }
            state.lastWrite = now
            return true
        }
        if due { write() }
    }

    /// Counts a pairing attempt, or says why it may not begin: too many began in the last
    /// minute.
    func admitAttempt(from address: String) -> PairingRefusal? {
        state.withLock { state in
            let now = Date()
            var recent = state.attemptsByAddress[address, default: []].filter { now.timeIntervalSince($0) <= 60 }
            guard recent.count < Self.maxAttemptsPerAddressPerMinute else {
                return PairingRefusal(
                    "too many pairing attempts from this address in the last minute (\(Self.maxAttemptsPerAddressPerMinute)); try again in a minute"
                )
            }
            if state.attemptsByAddress[address] == nil, state.attemptsByAddress.count >= Self.maxAddressesCounted {
                state.attemptsByAddress = state.attemptsByAddress.filter { _, times in
                    times.contains { now.timeIntervalSince($0) <= 60 }
                }
                guard state.attemptsByAddress.count < Self.maxAddressesCounted else {
                    return PairingRefusal("too many addresses tried to pair in the last minute; try again in a minute")
                }
            }
            recent.append(now)
            state.attemptsByAddress[address] = recent
            return nil
        }
    }

    /// A device's name as the operator sees it: at most 64 characters, with control and
    /// format characters, quotes and backslashes replaced (so that, quoted, it cannot pass
    /// for anything else in a log line or a terminal).
    static func cleanName(_ name: String) -> String {
        let scalars = name.unicodeScalars
        let cleaned = scalars.prefix(64).map { scalar -> String in
            let category = scalar.properties.generalCategory
            if category == .control || category == .format || category == .lineSeparator
                || category == .paragraphSeparator || scalar == "\"" || scalar == "\\"
                || scalar.properties.isNoncharacterCodePoint
            {
                return "?"
            }
            return String(scalar)
        }.joined()
        return cleaned + (scalars.count > 64 ? "…" : "")
    }

    /// Files a request from `identity`, or says why it cannot be: one from that device is
    /// already waiting, or as many as may wait are (in all, or from its address).
    func request(
        identity: String, deviceName: String, address: String, code: String,
        answer: @escaping @Sendable (PairingStatus, String?) -> Void
    ) -> Result<Request, PairingRefusal> {
        state.withLock { state in
            if state.pending.values.contains(where: { $0.identity == identity }) {
                return .failure(PairingRefusal("a pairing request from this device is already waiting"))
            }
            guard state.pending.count < Self.maxPending else {
                return .failure(
                    PairingRefusal("\(Self.maxPending) pairing requests are already waiting; try again later"))
            }
            guard state.pending.values.filter({ $0.address == address }).count < Self.maxPendingPerAddress else {
                return .failure(
                    PairingRefusal(
                        "\(Self.maxPendingPerAddress) pairing requests from this address are already waiting"))
            }
            let now = Date()
            state.filed.removeAll { now.timeIntervalSince($0) > 60 }
            guard state.filed.count < Self.maxAttemptsPerMinute else {
                return .failure(
                    PairingRefusal(
                        "too many pairing attempts reached the operator in the last minute (\(Self.maxAttemptsPerMinute)); try again in a minute"
                    ))
            }
            state.filed.append(now)
            let request = Request(
                number: state.next, identity: identity, deviceName: deviceName, address: address, code: code,
                requested: Date(), answer: answer)
            state.next += 1
            state.pending[request.number] = request
            return .success(request)
        }
    }

    /// The operator's decision on request `number`: an accepted device is paired (and kept);
    /// the requesting connection is told either way.
    public func decide(_ number: UInt64, accept: Bool) -> Result<Request, PairingRefusal> {
        let outcome = state.withLock { state -> Result<Request, PairingRefusal> in
            if accept, let unreadable = state.unreadable {
                return .failure(
                    PairingRefusal(
                        "the paired devices' file cannot be read (\(unreadable)): fix or remove it before pairing another device"
                    ))
            }
            guard let request = state.pending.removeValue(forKey: number) else {
                return .failure(PairingRefusal("there is no pairing request \(number) waiting"))
            }
            guard accept else { return .success(request) }
            let now = Date()
            state.devices[request.identity] = Device(
                identity: request.identity, name: request.deviceName, pairedAt: now, lastSeen: now,
                lastAddress: request.address)
            state.lastWrite = now
            return .success(request)
        }
        guard case .success(let request) = outcome else { return outcome }
        if accept { write() }
        logger.notice(
            "pairing request \(number) \(accept ? "accepted" : "refused")",
            metadata: ["device": "\(request.deviceName)", "identity": "\(request.identity)"])
        request.answer(accept ? .paired : .refused, accept ? nil : "the host's operator refused the pairing")
        return .success(request)
    }

    /// Request `number` ended without a decision: its connection closed, or the pairing
    /// timeout passed (then the connection is told).
    func withdraw(_ number: UInt64, timedOut: Bool) {
        guard let request = state.withLock({ $0.pending.removeValue(forKey: number) }) else { return }
        if timedOut {
            logger.notice("pairing request \(number) timed out", metadata: ["identity": "\(request.identity)"])
            request.answer(.timedOut, "no one accepted or refused the pairing in time")
        }
    }

    /// Unpairs the device whose identity is `identity` or starts with it (at least 8 hex
    /// digits, and only one device may match).
    public func revoke(_ identity: String) -> Result<Device, PairingRefusal> {
        let outcome = state.withLock { state -> Result<Device, PairingRefusal> in
            let key = identity.lowercased()
            guard key.count >= 8 else {
                return .failure(PairingRefusal("give at least 8 hex digits of the device's identity"))
            }
            let matches = state.devices.keys.filter { $0.hasPrefix(key) }
            guard matches.count == 1, let match = matches.first, let device = state.devices.removeValue(forKey: match)
            else {
                return .failure(
                    PairingRefusal(
                        matches.isEmpty
                            ? "no paired device has an identity starting with \(key)"
                            : "\(matches.count) paired devices have identities starting with \(key): give more digits"))
            }
            state.lastWrite = Date()
            return .success(device)
        }
        guard case .success(let device) = outcome else { return outcome }
        write()
        logger.notice("device revoked", metadata: ["device": "\(device.name)", "identity": "\(device.identity)"])
        return outcome
    }

    public var devices: [Device] {
        state.withLock { $0.devices.values.sorted { $0.pairedAt < $1.pairedAt } }
    }

    public var pending: [Request] {
        state.withLock { $0.pending.values.sorted { $0.number < $1.number } }
    }

    /// Saves the paired devices as they are now. Writes are serialized and each takes the
    /// list when it begins, so an older list (a `lastSeen` update that raced a revocation)
    /// never lands after a newer one.
    private func write() {
        writer.withLock { _ in
            guard let devices = state.withLock({ $0.unreadable == nil ? Array($0.devices.values) : nil }) else {
                return
            }
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .iso8601
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            do {
                let data = try encoder.encode(devices.sorted { $0.pairedAt < $1.pairedAt })
                try TLSIdentity.writeNew(file, String(decoding: data, as: UTF8.self) + "\n")
            } catch {
                logger.error("the paired devices could not be saved to \(file.path): \(error)")
            }
        }
    }

    /// Serializes the writes of `devices.json`.
    private let writer = Mutex(())
}

/// Why a pairing step could not be taken, in words for the client or the operator.
public struct PairingRefusal: Error, Sendable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
