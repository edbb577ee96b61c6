/// Why bytes could not be decoded as a ``Value`` or ``ValueSet``, or why values could not be
/// built: what went wrong, and where.
///
/// The ``description`` reads `message.items[3]: array mixes int and string`: the path of the
/// offending value from the root (named by the caller, `message` by default), then the reason.
public struct ValueSetError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The class of failure. Callers map it to a status: a protocol error for ``notWellFormed``,
    /// `Failure` (1) for ``notAValueSet`` and ``nestingTooDeep``, `MessageSizeTooLarge` (5) for
    /// ``tooLarge``.
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The bytes are not well-formed CBOR (RFC 8949 section 5.3.1): truncated, a reserved
        /// additional-information value, a misplaced break, bytes after the item, ...
        public static let notWellFormed = Code(rawValue: "notWellFormed")
        /// Well-formed CBOR that is not a ValueSet: null, an unknown tag, a non-text key, a
        /// duplicate key, a mixed array, an integer outside Int64, invalid UTF-8, ...
        public static let notAValueSet = Code(rawValue: "notAValueSet")
        /// Maps and arrays nested deeper than the limit (32 levels, the message being level 1).
        public static let nestingTooDeep = Code(rawValue: "nestingTooDeep")
        /// The encoding is longer than the caller's byte budget.
        public static let tooLarge = Code(rawValue: "tooLarge")
    }

    /// One step on the way from the root to the offending value.
    public enum PathComponent: Sendable, Hashable {
        case key(String)
        case index(Int)
    }

    public var code: Code
    /// What is wrong, in words, without the path.
    public var reason: String
    /// The steps from the root to the offending value; empty for the root itself.
    public var path: [PathComponent]
    /// The name of the root in ``description`` (`message` for a request's message).
    public var root: String
    /// The byte offset in the input at which the problem was found, when decoding.
    public var offset: Int?

    public init(
        _ code: Code,
        _ reason: String,
        at path: [PathComponent] = [],
        root: String = "message",
        offset: Int? = nil
    ) {
        self.code = code
        self.reason = reason
        self.path = path
        self.root = root
        self.offset = offset
    }

    /// The path as text: `message.items[3]`, `message["a key"]`.
    public var pathDescription: String {
        var text = root
        for component in path {
            switch component {
            case .index(let i):
                text += "[\(i)]"
            case .key(let k):
                if Self.isPlainKey(k) {
                    text += "." + k
                } else {
                    text += "[" + quoted(k) + "]"
                }
            }
        }
        return text
    }

    public var description: String { "\(pathDescription): \(reason)" }

    static func isPlainKey(_ key: String) -> Bool {
        guard let first = key.utf8.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else {
            return false
        }
        return key.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: "_")
        }
    }

    /// The same error one level further from the offending value.
    func inside(_ component: PathComponent) -> ValueSetError {
        var copy = self
        copy.path.insert(component, at: 0)
        return copy
    }
}

/// `text` as a double-quoted string with `"`, `\` and control characters (DEL too) escaped,
/// as in CBOR diagnostic notation and JSON (whose string escapes diagnostic notation borrows),
/// and in a TOML basic string.
package func quoted(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        default:
            if scalar.value < 0x20 || scalar.value == 0x7f {
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
    }
    return out + "\""
}
