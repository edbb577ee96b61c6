/// Checks that CBOR bytes are a valid ValueSet (every rule of CONTRACT section 3) without
/// building one: no `Value` is made, no string is copied (unless a map has non-ASCII keys,
/// whose equality is Swift's canonical equivalence), and a budget on the number of values
/// bounds the work whatever the message's shape. The host runs this on every message it
/// passes on; it accepts exactly what ``ValueSet/init(cbor:limits:root:)-(UnsafeRawBufferPointer,_,_)``
/// accepts, and its errors read the same.
struct ValueChecker: ValueWalker {
    var reader: CBORReader
    let maxDepth: Int
    let maxValues: Int
    var values = 0

    init(_ bytes: UnsafeRawBufferPointer, limits: DecodingLimits, maxValues: Int) {
        reader = CBORReader(bytes, budget: limits.maxBytes)
        maxDepth = limits.maxDepth
        self.maxValues = maxValues
    }

    mutating func countValue() throws(ValueSetError) {
        values += 1
        if values > maxValues {
            throw reader.error(.tooLarge, "the message holds more than \(maxValues) values, the limit")
        }
    }

    mutating func checkValueSet() throws(ValueSetError) {
        let head = try reader.readHead()
        guard head.major == 5 else {
            reader.offset = 0
            throw reader.error(.notAValueSet, "a ValueSet must be a map, not \(head.kindDescription)")
        }
        try countValue()
        try checkMap(head, depth: 1)
    }

    /// Checks the item at the cursor and returns its kind.
    mutating func checkValue(depth: Int) throws(ValueSetError) -> Value.Kind {
        try countValue()
        let head = try reader.readHead()
        switch head.major {
        case 0, 1:
            try checkInt64(head.argument, negative: head.major == 1)
            return .int
        case 2:
            _ = try byteCount(head)
            return .bytes
        case 3:
            try checkText(head)
            return .string
        case 4:
            try checkArray(head, depth: depth + 1)
            return .array
        case 5:
            try checkMap(head, depth: depth + 1)
            return .map
        case 6:
            return try checkTagged(head)
        default:
            switch head.info {
            case 20, 21: return .bool
            case 25, 26, 27: return .double
            default:
                try reader.checkSimple(head)
                if head.isBreak {
                    reader.offset -= 1
                    throw reader.error(.notWellFormed, "a break (0xff) outside an indefinite-length item")
                }
                throw reader.error(.notAValueSet, "\(head.kindDescription) is not a ValueSet kind")
            }
        }
    }

    /// Skips a byte string whose head has been read and returns its length.
    mutating func byteCount(_ head: CBORReader.Head) throws(ValueSetError) -> Int {
        if !head.isIndefinite { return try reader.readSpan(head.argument).count }
        var count = 0
        while !reader.consumeBreak() { count += try reader.readChunk(of: 2).count }
        return count
    }

    mutating func checkText(_ head: CBORReader.Head) throws(ValueSetError) {
        if !head.isIndefinite {
            try checkUTF8(try reader.readSpan(head.argument))
            return
        }
        while !reader.consumeBreak() { try checkUTF8(try reader.readChunk(of: 3)) }
    }

    func checkUTF8(_ span: UnsafeRawBufferPointer) throws(ValueSetError) {
        guard isValidUTF8(span) else {
            throw ValueSetError(.notAValueSet, "text string is not valid UTF-8", offset: reader.offset - span.count)
        }
    }

    mutating func checkArray(_ head: CBORReader.Head, depth: Int) throws(ValueSetError) {
        try checkDepth(depth)
        var first: Value.Kind?
        try forEachItem(head) { (this: inout ValueChecker, position) throws(ValueSetError) in
            if let next = this.reader.peekByte(), next >> 5 == 4 {
                throw this.reader.error(.notAValueSet, "an array may not hold arrays").inside(.index(position))
            }
            let kind: Value.Kind
            do throws(ValueSetError) {
                kind = try this.checkValue(depth: depth)
            } catch {
                throw error.inside(.index(position))
            }
            if let first, first != kind {
                throw this.reader.error(.notAValueSet, "array mixes \(first) and \(kind)").inside(.index(position))
            }
            first = first ?? kind
        }
    }

    mutating func checkMap(_ head: CBORReader.Head, depth: Int) throws(ValueSetError) {
        try checkDepth(depth)
        var keys = MapKeys()
        try forEachItem(head) { (this: inout ValueChecker, position) throws(ValueSetError) in
            let keyStart = this.reader.offset
            let keyHead = try this.reader.readHead()
            guard keyHead.major == 3 else {
                this.reader.offset = keyStart
                if keyHead.isBreak {
                    throw this.reader.error(.notWellFormed, "a break (0xff) outside an indefinite-length item")
                }
                throw this.reader.error(
                    .notAValueSet, "map keys must be text, but key \(position + 1) is \(keyHead.kindDescription)")
            }
            let key: MapKeys.Key
            if keyHead.isIndefinite {
                key = .text(try this.reader.readText(keyHead))
            } else {
                let span = try this.reader.readSpan(keyHead.argument)
                try this.checkUTF8(span)
                key = .bytes(span)
            }
            if !keys.insert(key) {
                this.reader.offset = keyStart
                throw this.reader.error(.notAValueSet, "duplicate key \(quoted(key.text))")
            }
            do throws(ValueSetError) {
                _ = try this.checkValue(depth: depth)
            } catch {
                throw error.inside(.key(key.text))
            }
        }
    }

    mutating func checkTagged(_ head: CBORReader.Head) throws(ValueSetError) -> Value.Kind {
        let start = reader.offset
        switch head.argument {
        case 1:
            let content = try reader.readHead()
            switch content.major {
            case 0, 1:
                try checkInt64(content.argument, negative: content.major == 1)
            case 7 where content.info >= 25 && content.info <= 27:
                break
            default:
                reader.offset = start
                throw reader.error(
                    .notAValueSet, "tag 1 (date) must hold an integer or a float, not \(content.kindDescription)")
            }
            return .date
        case 37:
            let content = try reader.readHead()
            guard content.major == 2 else {
                reader.offset = start
                throw reader.error(
                    .notAValueSet, "tag 37 (uuid) must hold a byte string, not \(content.kindDescription)")
            }
            let count = try byteCount(content)
            guard count == 16 else {
                reader.offset = start
                throw reader.error(.notAValueSet, "tag 37 (uuid) must hold 16 bytes, not \(count)")
            }
            return .uuid
        default:
            reader.offset = start
            throw reader.error(
                .notAValueSet, "tag \(head.argument) is not a ValueSet kind (only tag 1, date, and tag 37, uuid)")
        }
    }
}

/// The keys seen in one map, for the duplicate check. ASCII keys are compared as bytes, in
/// place; once a key with other characters appears, every key is compared as a `String`,
/// because Swift's string equality (which `ValueSet` uses) is canonical equivalence, under
/// which, for example, U+212A KELVIN SIGN equals "K".
struct MapKeys {
    enum Key {
        case bytes(UnsafeRawBufferPointer)
        case text(String)

        var text: String {
            switch self {
            case .bytes(let span): String(decoding: span, as: UTF8.self)
            case .text(let text): text
            }
        }

        var isASCII: Bool {
            switch self {
            case .bytes(let span): AtriumValues.isASCII(span)
            case .text(let text): text.utf8.allSatisfy { $0 < 0x80 }
            }
        }
    }

    struct Span: Hashable {
        let bytes: UnsafeRawBufferPointer
        static func == (lhs: Span, rhs: Span) -> Bool { lhs.bytes.elementsEqual(rhs.bytes) }
        func hash(into hasher: inout Hasher) { hasher.combine(bytes: bytes) }
    }

    /// The first few ASCII keys, in place: most maps have no more, and need no allocation.
    private var small = InlineArray<8, UnsafeRawBufferPointer>(repeating: UnsafeRawBufferPointer(start: nil, count: 0))
    private var smallCount = 0
    private var spans: Set<Span> = []
    private var texts: Set<String>?

    /// Adds `key`; false when an equal key was there already.
    mutating func insert(_ key: Key) -> Bool {
        if texts == nil, case .bytes(let span) = key, key.isASCII {
            if spans.isEmpty && smallCount < small.count {
                for index in 0..<smallCount where sameBytes(small[index], span) { return false }
                small[smallCount] = span
                smallCount += 1
                return true
            }
            if spans.isEmpty { spans = Set((0..<smallCount).map { Span(bytes: small[$0]) }) }
            return spans.insert(Span(bytes: span)).inserted
        }
        if texts == nil {
            texts = Set((0..<smallCount).map { String(decoding: small[$0], as: UTF8.self) })
            for span in spans { texts!.insert(String(decoding: span.bytes, as: UTF8.self)) }
        }
        return texts!.insert(key.text).inserted
    }
}

/// Whether every byte of `bytes` is ASCII (below 0x80).
@_spi(CBOR) @inlinable
public func isASCII(_ bytes: UnsafeRawBufferPointer) -> Bool {
    for byte in bytes where byte >= 0x80 { return false }
    return true
}

/// Whether `a` and `b` hold the same bytes (map and frame keys: a few bytes long).
@_spi(CBOR) @inlinable
public func sameBytes(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
    guard a.count == b.count else { return false }
    for index in 0..<a.count where a[index] != b[index] { return false }
    return true
}

/// Whether `bytes` are valid UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past
/// U+10FFFF), without making a String.
func isValidUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
    var index = 0
    let count = bytes.count
    // ASCII, the usual text, eight bytes at a time.
    while count - index >= 8, bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self) & 0x8080_8080_8080_8080 == 0 {
        index += 8
    }
    while index < count {
        let lead = bytes[index]
        if lead < 0x80 {
            index += 1
            continue
        }
        let length: Int
        var minimum: UInt32
        var scalar: UInt32
        switch lead {
        case 0xc2...0xdf: (length, minimum, scalar) = (2, 0x80, UInt32(lead & 0x1f))
        case 0xe0...0xef: (length, minimum, scalar) = (3, 0x800, UInt32(lead & 0x0f))
        case 0xf0...0xf4: (length, minimum, scalar) = (4, 0x10000, UInt32(lead & 0x07))
        default: return false
        }
        guard index + length <= count else { return false }
        for offset in 1..<length {
            let byte = bytes[index + offset]
            guard byte & 0xc0 == 0x80 else { return false }
            scalar = scalar << 6 | UInt32(byte & 0x3f)
        }
        guard scalar >= minimum, scalar <= 0x10ffff, !(0xd800...0xdfff).contains(scalar) else { return false }
        index += length
    }
    return true
}

extension ValueSet {
    /// Checks that `bytes` hold exactly one valid ValueSet, as
    /// ``init(cbor:limits:root:)-(UnsafeRawBufferPointer,_,_)`` would decode it, without
    /// building it: what a host or a relay calls on a message it passes on.
    ///
    /// - Parameter maxValues: how many values (at every level, the message map included) the
    ///   message may hold; past it the check stops with ``ValueSetError/Code/tooLarge``.
    /// - Throws: ``ValueSetError`` naming the path of the offending value and the reason.
    public static func validate(
        cbor bytes: UnsafeRawBufferPointer, limits: DecodingLimits = .default, maxValues: Int = .max,
        root: String = "message"
    ) throws(ValueSetError) {
        var checker = ValueChecker(bytes, limits: limits, maxValues: maxValues)
        do throws(ValueSetError) {
            try checker.checkValueSet()
            guard checker.reader.isAtEnd else {
                throw checker.reader.error(
                    .notWellFormed, "\(checker.reader.remaining) bytes after the end of the value")
            }
            if checker.reader.limitIsBudget {
                throw checker.reader.error(
                    .tooLarge, "the value is longer than the limit of \(checker.reader.limit) bytes")
            }
        } catch {
            var named = error
            named.root = root
            throw named
        }
    }
}
