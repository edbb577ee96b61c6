import AtriumProtocol

/// A JSON reader for manifests that takes RFC 8259 and nothing else, and says where it stopped:
/// the line and column of a trailing comma, a comment, a duplicate key, a leading zero, a
/// control character in a string, a lone surrogate escape, or bytes that are not UTF-8.
/// Foundation's reader accepts some of these silently (a manifest with a trailing comma or a
/// key given twice loaded, with one of the two values).
///
/// It also notes where each object key is (its path, as the manifest checks name fields:
/// `services[0].name`), so that a later check can point at the line.
struct StrictJSON {
    /// Where reading stopped, and why.
    struct Problem: Error, CustomStringConvertible {
        var line: Int
        var column: Int
        var reason: String
        var description: String { "line \(line), column \(column): \(reason)" }
    }

    /// The value read.
    let value: JSONValue
    /// The line of each object key and array element, by its path (`services[0].name`,
    /// `services[1]`; a key that is not a plain name is written `["a.b"]`). Kept for the first
    /// 5,000 keys and the first 5,000 elements whose paths are under 512 bytes: far more than a
    /// manifest has, and little enough that a crafted file cannot make it large.
    let lines: [String: Int]
    static let maxRecordedLines = 10_000
    static let maxRecordedPath = 512

    /// How deep arrays and objects may nest: far more than a manifest needs, and little enough
    /// that a crafted file cannot exhaust the stack.
    static let maxDepth = 64

    init(_ bytes: [UInt8]) throws(Problem) {
        var reader = Reader(bytes: bytes)
        // A byte order mark, as some editors write: RFC 8259 (8.1) lets a reader ignore it.
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) {
            reader.index = 3
            reader.lineStart = 3
        }
        reader.skipSpace()
        let value = try reader.value(path: "", depth: 0)
        reader.skipSpace()
        guard reader.index == bytes.count else { throw reader.problem("more after the end of the JSON value") }
        self.value = value
        lines = reader.lines
    }

    private struct Reader {
        let bytes: [UInt8]
        var index = 0
        var line = 1
        var lineStart = 0
        var lines: [String: Int] = [:]

        func problem(_ reason: String) -> Problem {
            problem(reason, at: (index, line, lineStart))
        }

        /// A problem at a position saved earlier (worked out only when there is a problem).
        func problem(_ reason: String, at position: (index: Int, line: Int, lineStart: Int)) -> Problem {
            // Columns count characters, not bytes: a UTF-8 continuation byte is not one.
            let end = min(position.index, bytes.count)
            let column = bytes[min(position.lineStart, end)..<end].filter { $0 & 0xC0 != 0x80 }.count + 1
            return Problem(line: position.line, column: column, reason: reason)
        }

        /// Keys and array elements have a budget each, so that a long array (in `config`, say)
        /// does not leave the keys after it without their lines.
        var recordedKeys = 0
        var recordedElements = 0
        mutating func record(_ path: String, line: Int, isKey: Bool) {
            if isKey {
                guard recordedKeys < StrictJSON.maxRecordedLines / 2 else { return }
                recordedKeys += 1
            } else {
                guard recordedElements < StrictJSON.maxRecordedLines / 2 else { return }
                recordedElements += 1
            }
            lines[path] = line
        }

        var current: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipSpace() {
            while let byte = current {
                switch byte {
                case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\r"):
                    index += 1
                case UInt8(ascii: "\n"):
                    index += 1
                    line += 1
                    lineStart = index
                default:
                    return
                }
            }
        }

        /// What a byte that cannot start a value is, in words.
        func unexpected(_ expected: String) -> Problem {
            guard let byte = current else { return problem("the file ends where \(expected) should be") }
            switch byte {
            case UInt8(ascii: "/"): return problem("comments are not JSON")
            case UInt8(ascii: "'"): return problem("strings take double quotes in JSON")
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                return problem("\(expected) should be here (a trailing comma is not JSON)")
            default:
                let shown =
                    byte >= 0x20 && byte < 0x7f
                    ? "'\(Character(Unicode.Scalar(byte)))'" : "byte 0x\(String(byte, radix: 16))"
                return problem("\(expected) should be here, not \(shown)")
            }
        }

        mutating func value(path: String?, depth: Int) throws(Problem) -> JSONValue {
            guard let byte = current else { throw unexpected("a value") }
            switch byte {
            case UInt8(ascii: "{"): return try object(path: path, depth: depth + 1)
            case UInt8(ascii: "["): return try array(path: path, depth: depth + 1)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): return try literal("true", .bool(true))
            case UInt8(ascii: "f"): return try literal("false", .bool(false))
            case UInt8(ascii: "n"): return try literal("null", .null)
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
            default: throw unexpected("a value")
            }
        }

        mutating func literal(_ word: String, _ value: JSONValue) throws(Problem) -> JSONValue {
            let utf8 = Array(word.utf8)
            guard index + utf8.count <= bytes.count, Array(bytes[index..<(index + utf8.count)]) == utf8 else {
                throw problem("not a JSON value (true, false and null are lowercase; NaN and Infinity are not JSON)")
            }
            index += utf8.count
            return value
        }

        mutating func object(path: String?, depth: Int) throws(Problem) -> JSONValue {
            guard depth <= StrictJSON.maxDepth else { throw problem("nested deeper than \(StrictJSON.maxDepth)") }
            index += 1  // {
            var members: [String: JSONValue] = [:]
            // Keys as their bytes: two spellings of one key that Unicode counts as the same are
            // two keys to JSON, but one to a Swift dictionary.
            var seen: [[UInt8]: Int] = [:]
            skipSpace()
            if current == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                skipSpace()
                guard current == UInt8(ascii: "\"") else { throw unexpected("a key in double quotes") }
                let keyAt = (index, line, lineStart)
                let key = try string()
                let keyBytes = Array(key.utf8)
                if let first = seen[keyBytes] {
                    throw problem(
                        "\"\(untrusted(key, limit: 80))\" is given twice in this object (first on line \(first))",
                        at: keyAt)
                }
                if members[key] != nil {
                    throw problem(
                        "\"\(untrusted(key, limit: 80))\" is given twice in this object, in two spellings Unicode counts as the same",
                        at: keyAt)
                }
                seen[keyBytes] = keyAt.1
                // The path, built only while it is short enough to record.
                var keyPath: String?
                if let path, path.utf8.count + key.utf8.count < StrictJSON.maxRecordedPath {
                    keyPath = path + StrictJSON.step(key, first: path.isEmpty)
                }
                if let keyPath { record(keyPath, line: keyAt.1, isKey: true) }
                skipSpace()
                guard current == UInt8(ascii: ":") else { throw unexpected("':' after the key") }
                index += 1
                skipSpace()
                members[key] = try value(path: keyPath, depth: depth)
                skipSpace()
                switch current {
                case UInt8(ascii: ","):
                    index += 1
                case UInt8(ascii: "}"):
                    index += 1
                    return .object(members)
                default:
                    throw unexpected("',' or '}'")
                }
            }
        }

        mutating func array(path: String?, depth: Int) throws(Problem) -> JSONValue {
            guard depth <= StrictJSON.maxDepth else { throw problem("nested deeper than \(StrictJSON.maxDepth)") }
            index += 1  // [
            var elements: [JSONValue] = []
            skipSpace()
            if current == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            }
            while true {
                skipSpace()
                let elementPath = path.flatMap { path in
                    path.utf8.count < StrictJSON.maxRecordedPath ? "\(path)[\(elements.count)]" : nil
                }
                if let elementPath { record(elementPath, line: line, isKey: false) }
                elements.append(try value(path: elementPath, depth: depth))
                skipSpace()
                switch current {
                case UInt8(ascii: ","):
                    index += 1
                case UInt8(ascii: "]"):
                    index += 1
                    return .array(elements)
                default:
                    throw unexpected("',' or ']'")
                }
            }
        }

        mutating func number() throws(Problem) -> Double {
            let start = index
            if current == UInt8(ascii: "-") { index += 1 }
            func digits(_ reader: inout Reader) -> Int {
                let from = reader.index
                while let byte = reader.current, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) {
                    reader.index += 1
                }
                return reader.index - from
            }
            let integerStart = index
            let integerDigits = digits(&self)
            guard integerDigits > 0 else { throw problem("a number needs a digit here") }
            if integerDigits > 1 && bytes[integerStart] == UInt8(ascii: "0") {
                index = integerStart
                throw problem("numbers do not start with 0 in JSON")
            }
            if current == UInt8(ascii: ".") {
                index += 1
                guard digits(&self) > 0 else { throw problem("a number needs a digit after '.'") }
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                index += 1
                if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
                guard digits(&self) > 0 else { throw problem("a number needs a digit in its exponent") }
            }
            let text = String(decoding: bytes[start..<index], as: UTF8.self)
            guard let number = Double(text), number.isFinite else {
                index = start
                throw problem("\(text) is out of range")
            }
            return number
        }

        mutating func string() throws(Problem) -> String {
            index += 1  // "
            var scalars = String.UnicodeScalarView()
            while true {
                guard let byte = current else { throw problem("the file ends inside a string") }
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    return String(scalars)
                case UInt8(ascii: "\\"):
                    index += 1
                    scalars.append(try escape())
                case 0..<0x20:
                    throw problem(
                        byte == UInt8(ascii: "\n")
                            ? "a string does not go on to the next line (end it, or write \\n)"
                            : "a control character must be escaped in a string")
                case 0x20..<0x80:
                    scalars.append(Unicode.Scalar(byte))
                    index += 1
                default:
                    scalars.append(try utf8Scalar())
                }
            }
        }

        /// One scalar of more than one UTF-8 byte, checked: no overlong forms, no surrogates,
        /// nothing past U+10FFFF.
        mutating func utf8Scalar() throws(Problem) -> Unicode.Scalar {
            let lead = bytes[index]
            let (count, minimum, initial): (Int, UInt32, UInt32) =
                switch lead {
                case 0xC2...0xDF: (2, 0x80, UInt32(lead & 0x1F))
                case 0xE0...0xEF: (3, 0x800, UInt32(lead & 0x0F))
                case 0xF0...0xF4: (4, 0x10000, UInt32(lead & 0x07))
                default: (0, 0, 0)
                }
            guard count > 0, index + count <= bytes.count else { throw problem("bytes that are not UTF-8") }
            var value = initial
            for offset in 1..<count {
                let byte = bytes[index + offset]
                guard byte & 0xC0 == 0x80 else { throw problem("bytes that are not UTF-8") }
                value = value << 6 | UInt32(byte & 0x3F)
            }
            guard value >= minimum, let scalar = Unicode.Scalar(value) else {
                throw problem("bytes that are not UTF-8")
            }
            index += count
            return scalar
        }

        mutating func escape() throws(Problem) -> Unicode.Scalar {
            guard let byte = current else { throw problem("the file ends inside a string") }
            index += 1
            switch byte {
            case UInt8(ascii: "\""): return "\""
            case UInt8(ascii: "\\"): return "\\"
            case UInt8(ascii: "/"): return "/"
            case UInt8(ascii: "b"): return "\u{08}"
            case UInt8(ascii: "f"): return "\u{0C}"
            case UInt8(ascii: "n"): return "\n"
            case UInt8(ascii: "r"): return "\r"
            case UInt8(ascii: "t"): return "\t"
            case UInt8(ascii: "u"):
                let high = try hex4()
                if (0xD800...0xDBFF).contains(high) {
                    guard current == UInt8(ascii: "\\"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "u")
                    else { throw problem("\\u\(String(high, radix: 16)) is half of a surrogate pair") }
                    index += 2
                    let low = try hex4()
                    guard (0xDC00...0xDFFF).contains(low) else {
                        throw problem("\\u\(String(high, radix: 16)) is half of a surrogate pair")
                    }
                    return Unicode.Scalar(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))!
                }
                guard let scalar = Unicode.Scalar(high) else {
                    throw problem("\\u\(String(high, radix: 16)) is half of a surrogate pair")
                }
                return scalar
            default:
                index -= 1
                let shown =
                    byte >= 0x20 && byte < 0x7f
                    ? String(Character(Unicode.Scalar(byte))) : "(byte 0x\(String(byte, radix: 16)))"
                throw problem("\\\(shown) is not an escape JSON knows")
            }
        }

        mutating func hex4() throws(Problem) -> UInt32 {
            guard index + 4 <= bytes.count else { throw problem("\\u needs four hex digits") }
            var value: UInt32 = 0
            for byte in bytes[index..<(index + 4)] {
                guard let digit = Character(Unicode.Scalar(byte)).hexDigitValue else {
                    throw problem("\\u needs four hex digits")
                }
                value = value << 4 | UInt32(digit)
            }
            index += 4
            return value
        }
    }
}

extension StrictJSON {
    /// `key` as a step of a path: `.name`, or `["a.b"]` for a key that is not a plain name.
    static func step(_ key: String, first: Bool) -> String {
        let plain =
            !key.isEmpty
            && key.utf8.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_")
                    || byte == UInt8(ascii: "-")
            }
        if plain { return first ? key : "." + key }
        return "[\"" + untrusted(key, limit: 64).replacingOccurrences(of: "\"", with: "\\\"") + "\"]"
    }
}
