/// A cursor over CBOR bytes that reads heads and checks well-formedness (RFC 8949 section 3
/// and appendix C), without copying the input.
///
/// The bytes must stay valid while the reader is in use (it is meant to live inside a
/// `withUnsafeBytes` closure). Every read is bounds-checked: malformed or hostile input makes
/// a method throw, never read out of bounds.
///
/// Limits: `budget` caps how many bytes the item may span; reading past it throws `tooLarge`
/// at the point where the budget is crossed, not after.
@_spi(CBOR) public struct CBORReader {
    /// An initial byte and its argument.
    public struct Head {
        /// Major type, 0 to 7.
        public var major: UInt8
        /// Additional information, 0 to 31.
        public var info: UInt8
        /// The argument: a value, a length, a count, a tag number, or a float's bits.
        public var argument: UInt64

        @inlinable
        public init(major: UInt8, info: UInt8, argument: UInt64) {
            self.major = major
            self.info = info
            self.argument = argument
        }

        /// Whether this head opens an indefinite-length string, array or map.
        @inlinable
        public var isIndefinite: Bool { info == 31 && major >= 2 && major <= 5 }
        /// Whether this head is the "break" stop code.
        @inlinable
        public var isBreak: Bool { major == 7 && info == 31 }
    }

    public let bytes: UnsafeRawBufferPointer
    /// The position of the next byte to read.
    public var offset: Int
    /// The end of what may be read: the input's end or the budget's, whichever comes first.
    @usableFromInline let limit: Int
    /// Whether `limit` is the budget's end rather than the input's.
    @usableFromInline let limitIsBudget: Bool

    /// A reader over `bytes`, starting at `offset`, that may read at most `budget` bytes.
    @inlinable
    public init(_ bytes: UnsafeRawBufferPointer, offset: Int = 0, budget: Int = .max) {
        self.bytes = bytes
        self.offset = offset
        let budgetEnd = budget >= bytes.count - offset ? bytes.count : offset + budget
        self.limit = budgetEnd
        self.limitIsBudget = budgetEnd < bytes.count
    }

    /// The bytes left to read before the limit.
    @inlinable
    public var remaining: Int { limit - offset }

    /// Whether every byte up to the limit has been read.
    @inlinable
    public var isAtEnd: Bool { offset >= limit }

    /// An error at the current position.
    public func error(_ code: ValueSetError.Code, _ reason: String) -> ValueSetError {
        ValueSetError(code, reason, offset: offset)
    }

    /// Throws unless `count` more bytes may be read.
    @inlinable @inline(__always)
    public func need(_ count: UInt64) throws(ValueSetError) {
        guard count > UInt64(remaining) else { return }
        try notEnough(count)
    }

    /// The error of ``need(_:)``, kept out of line so that the check itself is a comparison.
    @usableFromInline @inline(never)
    func notEnough(_ count: UInt64) throws(ValueSetError) {
        if limitIsBudget {
            throw error(.tooLarge, "the value is longer than the limit of \(limit) bytes")
        }
        throw error(.notWellFormed, "unexpected end of input: \(count) more bytes needed, \(remaining) left")
    }

    /// The next byte, without consuming it, or `nil` at the limit.
    @inlinable
    public func peekByte() -> UInt8? {
        offset < limit ? bytes[offset] : nil
    }

    @inlinable
    public mutating func readByte() throws(ValueSetError) -> UInt8 {
        try need(1)
        defer { offset += 1 }
        return bytes[offset]
    }

    /// Consumes `count` bytes and returns them in place.
    @inlinable
    public mutating func readSpan(_ count: UInt64) throws(ValueSetError) -> UnsafeRawBufferPointer {
        try need(count)
        let start = offset
        offset += Int(count)
        return UnsafeRawBufferPointer(rebasing: bytes[start..<offset])
    }

    /// Reads one head. Rejects reserved additional information (28 to 30) and an indefinite
    /// length on the major types that cannot have one. A break comes back as a head with
    /// ``Head/isBreak``; the caller decides whether one may stand there.
    @inlinable @inline(__always)
    public mutating func readHead() throws(ValueSetError) -> Head {
        // Most heads are one byte (a small integer, a short string's or a small map's length).
        if offset < limit {
            let initial = bytes[offset]
            if initial & 0x1f < 24 {
                offset += 1
                return Head(major: initial >> 5, info: initial & 0x1f, argument: UInt64(initial & 0x1f))
            }
        }
        return try readLongerHead()
    }

    /// ``readHead()`` for a head whose argument follows its first byte, or one that is not
    /// well-formed.
    @usableFromInline @inline(never)
    mutating func readLongerHead() throws(ValueSetError) -> Head {
        let initial = try readByte()
        let major = initial >> 5
        let info = initial & 0x1f
        let argument: UInt64
        switch info {
        case 0..<24:
            argument = UInt64(info)
        case 24:
            argument = UInt64(try readByte())
        case 25:
            argument = UInt64(try readBigEndian(UInt16.self))
        case 26:
            argument = UInt64(try readBigEndian(UInt32.self))
        case 27:
            argument = try readBigEndian(UInt64.self)
        case 28, 29, 30:
            offset -= 1
            throw error(.notWellFormed, "reserved additional information \(info) in initial byte 0x\(hex(initial))")
        default:  // 31
            if major < 2 || major == 6 {
                offset -= 1
                throw error(.notWellFormed, "major type \(major) cannot have an indefinite length")
            }
            argument = 0
        }
        return Head(major: major, info: info, argument: argument)
    }

    mutating func readBigEndian<T: FixedWidthInteger>(_: T.Type) throws(ValueSetError) -> T {
        try need(UInt64(MemoryLayout<T>.size))
        defer { offset += MemoryLayout<T>.size }
        return T(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self))
    }

    /// Consumes a break if one is next. Used to end indefinite-length items.
    @inlinable
    public mutating func consumeBreak() -> Bool {
        if peekByte() == 0xff {
            offset += 1
            return true
        }
        return false
    }

    /// Skips one whole data item, checking that it is well-formed, and allowing containers
    /// (and tags) to nest at most `maxDepth` levels below the current one.
    public mutating func skipItem(maxDepth: Int) throws(ValueSetError) {
        if skipSmallItem() { return }
        let head = try readHead()
        switch head.major {
        case 0, 1:
            return
        case 2, 3:
            try skipString(head)
        case 4, 5:
            guard maxDepth > 0 else {
                throw error(.nestingTooDeep, "containers nested too deeply")
            }
            if head.isIndefinite {
                var items = 0
                while !consumeBreak() {
                    try skipItem(maxDepth: maxDepth - 1)
                    items += 1
                }
                if head.major == 5 && items % 2 == 1 {
                    throw error(.notWellFormed, "indefinite-length map ends after a key, with no value")
                }
            } else {
                let perEntry: UInt64 = head.major == 5 ? 2 : 1
                try need(head.argument)  // each item takes a byte at least: refuse impossible counts early
                // skipItem tries skipSmallItem again: a few instructions, fewer than a skipItem
                // split in two would cost in calls (counted: 44 more a worker's frame).
                for _ in 0..<(head.argument * perEntry) where !skipSmallItem() {
                    try skipItem(maxDepth: maxDepth - 1)
                }
            }
        case 6:
            guard maxDepth > 0 else {
                throw error(.nestingTooDeep, "tags nested too deeply")
            }
            try skipItem(maxDepth: maxDepth - 1)
        default:
            try checkSimple(head)
            if head.isBreak {
                offset -= 1
                throw error(.notWellFormed, "a break (0xff) outside an indefinite-length item")
            }
        }
    }

    /// Skips the next item when its head is one byte and it is whole within the limit: an
    /// integer or simple value below 24, or a string shorter than 24 bytes (most of a map's keys
    /// and many of its values). Returns false, having read nothing, for anything else, which
    /// ``skipItem(maxDepth:)`` then reads the long way, errors and all.
    @inline(__always)
    mutating func skipSmallItem() -> Bool {
        guard offset < limit else { return false }
        let initial = bytes[offset]
        let info = Int(initial & 0x1f)
        guard info < 24 else { return false }
        switch initial >> 5 {
        case 0, 1, 7:
            offset += 1
            return true
        case 2, 3:
            guard info < limit - offset else { return false }
            offset += 1 + info
            return true
        default:
            return false
        }
    }

    /// Skips the content of a string whose head has been read.
    public mutating func skipString(_ head: Head) throws(ValueSetError) {
        if head.isIndefinite {
            while !consumeBreak() {
                _ = try readChunk(of: head.major)
            }
        } else {
            try need(head.argument)
            offset += Int(head.argument)
        }
    }

    /// Reads one chunk of an indefinite-length string of `major` type: it must be a
    /// definite-length string of the same major type.
    public mutating func readChunk(of major: UInt8) throws(ValueSetError) -> UnsafeRawBufferPointer {
        let chunk = try readHead()
        guard chunk.major == major, !chunk.isIndefinite else {
            offset -= 1
            let what = major == 2 ? "byte" : "text"
            throw error(
                .notWellFormed,
                "a chunk of an indefinite-length \(what) string must be a definite-length \(what) string"
            )
        }
        return try readSpan(chunk.argument)
    }

    /// Rejects the two-byte form of a simple value below 32, which is not well-formed.
    public func checkSimple(_ head: Head) throws(ValueSetError) {
        if head.info == 24 && head.argument < 32 {
            throw error(.notWellFormed, "simple value \(head.argument) in the two-byte form (0xf8)")
        }
    }
}

extension CBORReader {
    /// Reads a text string whose head has been read, definite or in chunks, checking that it
    /// (each chunk, as RFC 8949 requires) is valid UTF-8.
    public mutating func readText(_ head: Head) throws(ValueSetError) -> String {
        if !head.isIndefinite {
            return try utf8(try readSpan(head.argument))
        }
        var text = ""
        while !consumeBreak() {
            text += try utf8(try readChunk(of: 3))
        }
        return text
    }

    /// `span` as a String, when it is valid UTF-8.
    ///
    /// `String(decoding:as:)` is the fast, specialised path, but it repairs invalid input with
    /// U+FFFD; a repair always changes the bytes, so comparing them back is the check.
    func utf8(_ span: UnsafeRawBufferPointer) throws(ValueSetError) -> String {
        let units = UnsafeBufferPointer(start: span.baseAddress?.assumingMemoryBound(to: UInt8.self), count: span.count)
        let text = String(decoding: units, as: UTF8.self)
        if units.contains(where: { $0 >= 0x80 }) {
            guard text.utf8.elementsEqual(units) else {
                throw ValueSetError(.notAValueSet, "text string is not valid UTF-8", offset: offset - span.count)
            }
        }
        return text
    }
}

extension CBORReader.Head {
    /// What this head stands for, for error messages: `an integer`, `null`, `tag 0`, ...
    @_spi(CBOR) public var kindDescription: String {
        switch major {
        case 0, 1: return "an integer"
        case 2: return "a byte string"
        case 3: return "a text string"
        case 4: return "an array"
        case 5: return "a map"
        case 6: return "tag \(argument)"
        default:
            switch info {
            case 20, 21: return "a bool"
            case 22: return "null"
            case 23: return "undefined"
            case 25, 26, 27: return "a float"
            case 31: return "a break"
            default: return "simple value \(argument)"
            }
        }
    }
}

func hex(_ byte: UInt8) -> String {
    let digits = Array("0123456789abcdef".utf8)
    return String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 0xf)]], as: UTF8.self)
}
