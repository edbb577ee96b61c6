public import AtriumValues
import Foundation

/// Turning JSON and `KEY=VALUE` words into messages, and messages into JSON, for tools and
/// scripts.
public enum MessageText {
    /// Why text could not be made into a message.
    public struct Problem: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// A JSON object as a message. Numbers written without a fraction or exponent become
    /// ints, others doubles; arrays must be of one kind (as ValueSet arrays are); `null` is
    /// refused, since a ValueSet has none.
    public static func valueSet(json: String) throws -> ValueSet {
        var parser = JSONParser(Array(json.utf8))
        let value = try parser.document()
        guard case .map(let set) = value else {
            throw Problem(description: "the message must be a JSON object, like {\"Type\": \"ping\"}")
        }
        return set
    }

    /// `KEY=VALUE` words as a message: `Count=3` is an int, `Ratio=0.5` a double,
    /// `Ok=true` a bool, `Name=ping` (or anything else) a string; `Name:=3` forces a string.
    public static func valueSet(arguments: [String]) throws -> ValueSet {
        var set = ValueSet()
        for argument in arguments {
            let (key, text, forcedString) = try split(argument)
            set[key] = forcedString ? .string(text) : guessed(text)
        }
        return set
    }

    /// A message as JSON: dates as ISO 8601 text, UUIDs as text, bytes as base64, keys in
    /// the message's order.
    public static func json(_ set: ValueSet, pretty: Bool = true) -> String {
        var out = ""
        write(.map(set), to: &out, indent: pretty ? 0 : nil)
        return out
    }

    static func write(_ value: Value, to out: inout String, indent: Int?) {
        let newline = indent.map { "\n" + String(repeating: "  ", count: $0 + 1) } ?? ""
        let close = indent.map { "\n" + String(repeating: "  ", count: $0) } ?? ""
        let inner = indent.map { $0 + 1 }
        switch value {
        case .string(let text): out += quoted(text)
        case .int(let int): out += String(int)
        case .double(let double): out += double.isFinite ? "\(double)" : quoted("\(double)")
        case .bool(let bool): out += bool ? "true" : "false"
        case .date(let date):
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            out += quoted(formatter.string(from: date.date))
        case .uuid(let uuid): out += quoted(uuid.uuidString)
        case .bytes(let bytes): out += quoted(Data(bytes).base64EncodedString())
        case .array(let array):
            out += "["
            for (position, element) in array.enumerated() {
                out += (position > 0 ? "," : "") + newline
                write(element, to: &out, indent: inner)
            }
            out += (array.isEmpty ? "" : close) + "]"
        case .map(let set):
            out += "{"
            for (position, entry) in set.enumerated() {
                out += (position > 0 ? "," : "") + newline + quoted(entry.key) + (indent == nil ? ":" : ": ")
                write(entry.value, to: &out, indent: inner)
            }
            out += (set.isEmpty ? "" : close) + "}"
        }
    }

}

/// A small JSON reader that keeps what JSONDecoder cannot: whether a number was written
/// with a fraction (`1.0` is a double, `1` an int), the order of keys, and where an error is.
struct JSONParser {
    let bytes: [UInt8]
    var position = 0
    /// Every number a double (for a field declared double, or an array of doubles: `[1, 2.5]`).
    var numbersAsDoubles = false

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    func problem(_ reason: String) -> MessageText.Problem {
        MessageText.Problem(description: "not valid JSON at character \(position + 1): \(reason)")
    }

    mutating func skipSpace() {
        while position < bytes.count, [0x20, 0x09, 0x0a, 0x0d].contains(bytes[position]) { position += 1 }
    }

    mutating func document() throws -> Value {
        let value = try self.value(path: "message", depth: 0)
        skipSpace()
        guard position == bytes.count else { throw problem("unexpected text after the end") }
        return value
    }

    mutating func expect(_ word: String) throws {
        let utf8 = Array(word.utf8)
        guard bytes.count - position >= utf8.count, Array(bytes[position..<position + utf8.count]) == utf8 else {
            throw problem("expected \(word)")
        }
        position += utf8.count
    }

    mutating func value(path: String, depth: Int) throws -> Value {
        guard depth < 64 else { throw problem("nested too deeply") }
        skipSpace()
        guard position < bytes.count else { throw problem("unexpected end") }
        switch bytes[position] {
        case UInt8(ascii: "{"):
            position += 1
            var set = ValueSet()
            skipSpace()
            if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
                position += 1
                return .map(set)
            }
            while true {
                skipSpace()
                let key = try string()
                skipSpace()
                try expect(":")
                set[key] = try value(path: "\(path).\(key)", depth: depth + 1)
                skipSpace()
                guard position < bytes.count else { throw problem("unexpected end in an object") }
                if bytes[position] == UInt8(ascii: ",") {
                    position += 1
                    continue
                }
                try expect("}")
                return .map(set)
            }
        case UInt8(ascii: "["):
            position += 1
            var values: [Value] = []
            skipSpace()
            if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
                position += 1
                return .array(ValueArray())
            }
            while true {
                values.append(try value(path: "\(path)[\(values.count)]", depth: depth + 1))
                skipSpace()
                guard position < bytes.count else { throw problem("unexpected end in an array") }
                if bytes[position] == UInt8(ascii: ",") {
                    position += 1
                    continue
                }
                try expect("]")
                // JSON has numbers, not ints and doubles: [1, 2.5] is an array of doubles.
                if values.contains(where: { $0.kind == .double }), values.allSatisfy({ $0.number != nil }) {
                    values = values.map { .double($0.number!) }
                }
                do {
                    return .array(try ValueArray(values))
                } catch {
                    throw MessageText.Problem(
                        description: "\(path)\(error.pathDescription.dropFirst("message".count)): \(error.reason)")
                }
            }
        case UInt8(ascii: "\""):
            return .string(try string())
        case UInt8(ascii: "t"):
            try expect("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expect("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expect("null")
            throw MessageText.Problem(description: "\(path): null has no ValueSet form; leave the key out")
        default:
            return try number()
        }
    }

    mutating func number() throws -> Value {
        let start = position
        var isDouble = false
        while position < bytes.count {
            let byte = bytes[position]
            if (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
                || byte == UInt8(ascii: "+")
            {
                position += 1
            } else if byte == UInt8(ascii: ".") || byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") {
                isDouble = true
                position += 1
            } else {
                break
            }
        }
        let text = String(decoding: bytes[start..<position], as: UTF8.self)
        if !isDouble, !numbersAsDoubles, let int = Int64(text) { return .int(int) }
        guard !text.isEmpty, let double = Double(text) else {
            position = start
            throw problem("expected a value")
        }
        return .double(double)
    }

    mutating func string() throws -> String {
        guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { throw problem("expected a string") }
        position += 1
        var scalars = String.UnicodeScalarView()
        var raw: [UInt8] = []
        func flush() throws {
            guard let text = String(validating: raw, as: UTF8.self) else { throw problem("text is not valid UTF-8") }
            scalars.append(contentsOf: text.unicodeScalars)
            raw.removeAll()
        }
        while position < bytes.count {
            let byte = bytes[position]
            position += 1
            switch byte {
            case UInt8(ascii: "\""):
                try flush()
                return String(scalars)
            case UInt8(ascii: "\\"):
                try flush()
                guard position < bytes.count else { throw problem("unexpected end in a string") }
                let escape = bytes[position]
                position += 1
                switch escape {
                case UInt8(ascii: "n"): scalars.append("\n")
                case UInt8(ascii: "t"): scalars.append("\t")
                case UInt8(ascii: "r"): scalars.append("\r")
                case UInt8(ascii: "b"): scalars.append("\u{8}")
                case UInt8(ascii: "f"): scalars.append("\u{c}")
                case UInt8(ascii: "u"):
                    var code = try hex4()
                    if (0xD800..<0xDC00).contains(code) {
                        try expect("\\u")
                        let low = try hex4()
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw problem("invalid \\u escape") }
                    scalars.append(scalar)
                default: scalars.append(Unicode.Scalar(escape))
                }
            default:
                raw.append(byte)
            }
        }
        throw problem("unexpected end in a string")
    }

    mutating func hex4() throws -> UInt32 {
        guard bytes.count - position >= 4,
            let code = UInt32(String(decoding: bytes[position..<position + 4], as: UTF8.self), radix: 16)
        else {
            throw problem("expected four hex digits after \\u")
        }
        position += 4
        return code
    }
}
