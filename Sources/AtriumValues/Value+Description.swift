#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

// Readable text in the style of CBOR diagnostic notation (RFC 8949 section 8):
// `{"Type": "ping", "When": 1(1363896240.5), "Id": 37(h'…'), "Data": h'0102', "Count": 3}`.

extension Value: CustomStringConvertible, CustomDebugStringConvertible {
    public var description: String {
        var text = ""
        write(to: &text)
        return text
    }

    public var debugDescription: String { description }

    func write(to text: inout String) {
        switch self {
        case .string(let value):
            text += quoted(value)
        case .int(let value):
            text += String(value)
        case .double(let value):
            text += diagnostic(value)
        case .bool(let value):
            text += value ? "true" : "false"
        case .date(let date):
            text += "1("
            let seconds = date.secondsSince1970
            if seconds == seconds.rounded(.towardZero), abs(seconds) < 0x1p63 {
                text += String(Int64(seconds))
            } else {
                text += diagnostic(seconds)
            }
            text += ")"
        case .uuid(let uuid):
            text += "37(h'" + hexString(Swift.withUnsafeBytes(of: uuid.uuid) { Array($0) }) + "')"
        case .bytes(let bytes):
            text += "h'" + hexString(bytes) + "'"
        case .array(let array):
            text += "["
            for (position, element) in array.enumerated() {
                if position > 0 { text += ", " }
                element.write(to: &text)
            }
            text += "]"
        case .map(let set):
            set.write(to: &text)
        }
    }
}

extension ValueSet: CustomStringConvertible, CustomDebugStringConvertible {
    public var description: String {
        var text = ""
        write(to: &text)
        return text
    }

    public var debugDescription: String { description }

    func write(to text: inout String) {
        text += "{"
        for (position, entry) in entries.enumerated() {
            if position > 0 { text += ", " }
            text += quoted(entry.key)
            text += ": "
            entry.value.write(to: &text)
        }
        text += "}"
    }
}

extension ValueArray: CustomStringConvertible {
    public var description: String { Value.array(self).description }
}

/// A double as diagnostic notation writes it: always with a fraction or exponent, and
/// `NaN`, `Infinity`, `-Infinity` for the specials.
func diagnostic(_ value: Double) -> String {
    if value.isNaN { return "NaN" }
    if value.isInfinite { return value < 0 ? "-Infinity" : "Infinity" }
    let text = String(value)
    return text.contains(where: { $0 == "." || $0 == "e" }) ? text : text + ".0"
}

func hexString(_ bytes: [UInt8]) -> String {
    var text = ""
    text.reserveCapacity(bytes.count * 2)
    for byte in bytes { text += hex(byte) }
    return text
}
