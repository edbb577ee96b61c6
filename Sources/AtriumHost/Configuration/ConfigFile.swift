import AtriumValues

/// atriumd's configuration file: TOML's top-level `key = value` lines, nothing more.
///
/// ```toml
/// # /etc/atrium/atriumd.conf
/// listen = "0.0.0.0:7340"
/// manifests = ["/etc/atrium/manifests.d", "/srv/atrium/manifests"]
/// response-timeout = 60
/// no-watch = true
/// ```
///
/// Every file this reads is valid TOML, read as TOML reads it. What TOML has and an option
/// has no use for (tables, dates, multi-line strings, inline tables) is refused with the line,
/// as is a key set twice.
public struct ConfigFile: Sendable, Equatable {
    public enum Value: Sendable, Equatable, CustomStringConvertible {
        case string(String)
        case integer(Int)
        case float(Double)
        case boolean(Bool)
        case array([Value])

        /// What kind of value it is, for messages ("a string", "a list").
        public var kind: String {
            switch self {
            case .string: "a string"
            case .integer: "a whole number"
            case .float: "a number"
            case .boolean: "true or false"
            case .array: "a list"
            }
        }

        /// The value as TOML writes it.
        public var description: String {
            switch self {
            case .string(let text): ConfigFile.quoted(text)
            case .integer(let number): String(number)
            case .float(let number): String(number)
            case .boolean(let flag): flag ? "true" : "false"
            case .array(let values): "[" + values.map(\.description).joined(separator: ", ") + "]"
            }
        }
    }

    public struct Entry: Sendable, Equatable {
        public var key: String
        public var value: Value
        /// The line the key is on (from 1).
        public var line: Int
    }

    /// The file's path, as messages name it.
    public var path: String
    public var entries: [Entry]

    /// A mistake in the file, with the line and the key where it is known.
    public struct Error: Swift.Error, Sendable, Equatable, CustomStringConvertible {
        public var path: String
        public var line: Int
        public var key: String?
        public var reason: String

        public init(path: String, line: Int, key: String?, reason: String) {
            self.path = path
            self.line = line
            self.key = key
            self.reason = reason
        }

        public var description: String {
            "\(path), line \(line)" + (key.map { ", key '\($0)'" } ?? "") + ": \(reason)"
        }
    }

    /// Reads `text`, the content of the file at `path`.
    public init(parsing text: String, path: String) throws(ConfigFile.Error) {
        self.path = path
        var bytes = Array(text.utf8)
        // A byte order mark some editors write first is not part of the first key.
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
        var parser = Parser(bytes: bytes, path: path)
        entries = try parser.entries()
    }

    /// How `--print-config` writes an option's value: bare when TOML reads that text back as
    /// the number it is (`60`, `2.5`), quoted otherwise (`"007"`, `"1e5"`, `"Kitchen"`), so that
    /// what it prints reads back as the same text.
    public static func written(_ text: String) -> String {
        if let number = Parser.number(text), number.description == text { return text }
        return quoted(text)
    }

    /// `text` as a TOML basic string (JSON's escapes, which TOML shares).
    public static func quoted(_ text: String) -> String {
        AtriumValues.quoted(text)
    }
}

/// A reader of the file's bytes that knows its line.
private struct Parser {
    let bytes: [UInt8]
    let path: String
    var index = 0
    var line = 1
    /// The key being read, for messages.
    var key: String?
    /// Whether a list is being read (lists do not nest).
    var inArray = false

    init(bytes: [UInt8], path: String) {
        self.bytes = bytes
        self.path = path
    }

    func fail(_ reason: String, line: Int? = nil) -> ConfigFile.Error {
        ConfigFile.Error(path: path, line: line ?? self.line, key: key, reason: reason)
    }

    var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    mutating func entries() throws(ConfigFile.Error) -> [ConfigFile.Entry] {
        var entries: [ConfigFile.Entry] = []
        var lines: [String: Int] = [:]
        while true {
            skipBlankLinesAndComments()
            guard let byte = current else { return entries }
            key = nil
            if byte == UInt8(ascii: "[") {
                throw fail("tables ([name]) are not used: every option is a key at the top level")
            }
            let start = index
            while let byte = current, Self.isKeyByte(byte) { index += 1 }
            guard index > start else {
                throw fail(
                    "expected an option name (letters, digits, '-' and '_'), then '=' and its value; got '\(rest())'")
            }
            let name = String(decoding: bytes[start..<index], as: UTF8.self)
            key = name
            let keyLine = line
            skipSpaces()
            guard current == UInt8(ascii: "=") else {
                throw fail(current == UInt8(ascii: ".") ? "dotted keys are not used" : "expected '=' after the key")
            }
            index += 1
            skipSpaces()
            let value = try readValue()
            skipSpaces()
            skipComment()
            guard current == nil || current == UInt8(ascii: "\n") || isCRLF else {
                throw fail("unexpected '\(rest())' after the value (one key = value a line; # starts a comment)")
            }
            if let first = lines[name] {
                throw fail("set twice (first on line \(first))", line: keyLine)
            }
            lines[name] = keyLine
            entries.append(ConfigFile.Entry(key: name, value: value, line: keyLine))
        }
    }

    static func isKeyByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
            true
        default: false
        }
    }

    var isCRLF: Bool {
        current == UInt8(ascii: "\r") && index + 1 < bytes.count && bytes[index + 1] == UInt8(ascii: "\n")
    }

    /// The rest of the line, for messages.
    func rest() -> String {
        var end = index
        while end < bytes.count, bytes[end] != UInt8(ascii: "\n"), end - index < 40 { end += 1 }
        return String(decoding: bytes[index..<end], as: UTF8.self).trimmingSuffixWhitespace()
    }

    mutating func skipSpaces() {
        while current == UInt8(ascii: " ") || current == UInt8(ascii: "\t") { index += 1 }
    }

    mutating func skipComment() {
        guard current == UInt8(ascii: "#") else { return }
        while let byte = current, byte != UInt8(ascii: "\n") { index += 1 }
    }

    /// Skips spaces, comments and line ends, counting lines.
    mutating func skipBlankLinesAndComments() {
        while true {
            skipSpaces()
            skipComment()
            if current == UInt8(ascii: "\n") {
                index += 1
                line += 1
            } else if isCRLF {
                index += 2
                line += 1
            } else {
                return
            }
        }
    }

    mutating func readValue() throws(ConfigFile.Error) -> ConfigFile.Value {
        guard let byte = current, byte != UInt8(ascii: "\n"), byte != UInt8(ascii: "#"), !isCRLF else {
            throw fail("no value after '='")
        }
        switch byte {
        case UInt8(ascii: "\""):
            if starts(with: "\"\"\"") { throw fail("multi-line strings are not used: write the value on one line") }
            return .string(try readBasicString())
        case UInt8(ascii: "'"):
            if starts(with: "'''") { throw fail("multi-line strings are not used: write the value on one line") }
            return .string(try readLiteralString())
        case UInt8(ascii: "["):
            return try readArray()
        case UInt8(ascii: "{"):
            throw fail("inline tables ({...}) are not used")
        default:
            return try readBare()
        }
    }

    func starts(with text: String) -> Bool {
        let prefix = Array(text.utf8)
        return bytes.count - index >= prefix.count && Array(bytes[index..<index + prefix.count]) == prefix
    }

    mutating func readBasicString() throws(ConfigFile.Error) -> String {
        index += 1
        var scalars = String.UnicodeScalarView()
        var run: [UInt8] = []
        func flush() {
            scalars.append(contentsOf: String(decoding: run, as: UTF8.self).unicodeScalars)
            run.removeAll()
        }
        while let byte = current {
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                flush()
                return String(scalars)
            case UInt8(ascii: "\\"):
                flush()
                index += 1
                guard let escape = current else { break }
                index += 1
                switch escape {
                case UInt8(ascii: "\""): scalars.append("\"")
                case UInt8(ascii: "\\"): scalars.append("\\")
                case UInt8(ascii: "b"): scalars.append("\u{8}")
                case UInt8(ascii: "t"): scalars.append("\t")
                case UInt8(ascii: "n"): scalars.append("\n")
                case UInt8(ascii: "f"): scalars.append("\u{c}")
                case UInt8(ascii: "r"): scalars.append("\r")
                case UInt8(ascii: "u"), UInt8(ascii: "U"):
                    let count = escape == UInt8(ascii: "u") ? 4 : 8
                    guard bytes.count - index >= count,
                        bytes[index..<index + count].allSatisfy({ Character(Unicode.Scalar($0)).isHexDigit }),
                        let value = UInt32(String(decoding: bytes[index..<index + count], as: UTF8.self), radix: 16),
                        let scalar = Unicode.Scalar(value)
                    else {
                        throw fail("\\\(Character(Unicode.Scalar(escape))) takes \(count) hex digits of a character")
                    }
                    index += count
                    scalars.append(scalar)
                default:
                    throw fail(
                        "unknown escape '\\\(Character(Unicode.Scalar(escape)))' in a string (a path's backslash is written \\\\, or use 'single quotes')"
                    )
                }
            case UInt8(ascii: "\n"):
                throw fail("the string does not end on its line (a closing \" is missing)")
            case _ where byte < 0x20 && byte != UInt8(ascii: "\t") || byte == 0x7f:
                throw fail("a control character in a string (write it as an escape, such as \\n)")
            default:
                run.append(byte)
                index += 1
            }
        }
        throw fail("the string does not end (a closing \" is missing)")
    }

    mutating func readLiteralString() throws(ConfigFile.Error) -> String {
        index += 1
        let start = index
        while let byte = current {
            if byte == UInt8(ascii: "'") {
                let text = String(decoding: bytes[start..<index], as: UTF8.self)
                index += 1
                return text
            }
            if byte == UInt8(ascii: "\n") { break }
            if byte < 0x20 && byte != UInt8(ascii: "\t") || byte == 0x7f {
                throw fail("a control character in a string")
            }
            index += 1
        }
        throw fail("the string does not end on its line (a closing ' is missing)")
    }

    mutating func readArray() throws(ConfigFile.Error) -> ConfigFile.Value {
        let opened = line
        guard !inArray else { throw fail("a list inside a list is not used: no option takes one") }
        inArray = true
        defer { inArray = false }
        index += 1
        var values: [ConfigFile.Value] = []
        while true {
            skipBlankLinesAndComments()
            guard let byte = current else {
                throw fail("the list opened on line \(opened) does not end (a ] is missing)")
            }
            if byte == UInt8(ascii: "]") {
                index += 1
                return .array(values)
            }
            values.append(try readValue())
            skipBlankLinesAndComments()
            if current == nil {
                throw fail("the list opened on line \(opened) does not end (a ] is missing)")
            } else if current == UInt8(ascii: ",") {
                index += 1
            } else if current != UInt8(ascii: "]") {
                throw fail("expected ',' or ']' in the list; got '\(rest())'")
            }
        }
    }

    /// true, false or a number.
    mutating func readBare() throws(ConfigFile.Error) -> ConfigFile.Value {
        let start = index
        while let byte = current,
            !(byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\n")
                || byte == UInt8(ascii: "\r") || byte == UInt8(ascii: "#") || byte == UInt8(ascii: ",")
                || byte == UInt8(ascii: "]"))
        {
            index += 1
        }
        let word = String(decoding: bytes[start..<index], as: UTF8.self)
        switch word {
        case "true": return .boolean(true)
        case "false": return .boolean(false)
        default: break
        }
        if let number = Self.number(word) { return number }
        if !word.isEmpty,
            word.utf8.allSatisfy({
                Self.isDigit($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "+")
            }),
            word.utf8.contains(where: Self.isDigit)
        {
            throw fail(
                "'\(word)' is not a number this option can hold (too large, or written as TOML does not write one)")
        }
        throw fail("'\(word)' is not a value: a string is quoted (\"\(word)\"); else a number, true or false")
    }

    /// A TOML decimal integer or float (underscores between digits allowed); nil otherwise.
    static func number(_ word: String) -> ConfigFile.Value? {
        let bytes = Array(word.utf8)
        guard !bytes.isEmpty else { return nil }
        // Underscores only between two digits.
        for (position, byte) in bytes.enumerated() where byte == UInt8(ascii: "_") {
            guard position > 0, position + 1 < bytes.count, isDigit(bytes[position - 1]), isDigit(bytes[position + 1])
            else { return nil }
        }
        let plain = word.replacingUnderscores()
        let unsigned = plain.hasPrefix("+") || plain.hasPrefix("-") ? String(plain.dropFirst()) : plain
        guard let first = unsigned.utf8.first, isDigit(first) else { return nil }
        // No leading zeros, as TOML says (0 itself, and 0.5, are fine).
        if unsigned.count > 1, first == UInt8(ascii: "0"), isDigit(Array(unsigned.utf8)[1]) { return nil }
        if unsigned.utf8.allSatisfy(isDigit) {
            return Int(plain.hasPrefix("+") ? String(plain.dropFirst()) : plain).map(ConfigFile.Value.integer)
        }
        guard
            unsigned.utf8.allSatisfy({
                isDigit($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "e") || $0 == UInt8(ascii: "E")
                    || $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "-")
            }), let last = unsigned.utf8.last, isDigit(last), !unsigned.contains(".e"), !unsigned.contains(".E"),
            let value = Double(plain), value.isFinite
        else { return nil }
        return .float(value)
    }

    static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
}

extension String {
    fileprivate func trimmingSuffixWhitespace() -> String {
        var text = self
        while let last = text.last, last == " " || last == "\t" || last == "\r" { text.removeLast() }
        return text
    }

    fileprivate func replacingUnderscores() -> String { String(filter { $0 != "_" }) }
}
