#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Limits applied while decoding, so that a hostile input is refused as soon as it crosses
/// one, before the work or the memory it would take.
public struct DecodingLimits: Sendable, Hashable {
    /// How many levels maps and arrays may nest, the outermost map or array being level 1.
    /// CONTRACT section 3 fixes this at 32 for messages.
    public var maxDepth: Int
    /// How many bytes the encoding may take.
    public var maxBytes: Int

    public init(maxDepth: Int = 32, maxBytes: Int = .max) {
        self.maxDepth = maxDepth
        self.maxBytes = maxBytes
    }

    /// 32 levels, no byte budget.
    public static let `default` = DecodingLimits()
}

/// What the decoder (``ValueReader``) and the validator (``ValueChecker``) share: a cursor
/// over the bytes, the depth limit, and the rules that do not depend on building values.
protocol ValueWalker {
    var reader: CBORReader { get set }
    var maxDepth: Int { get }
}

extension ValueWalker {
    func checkDepth(_ depth: Int) throws(ValueSetError) {
        guard depth <= maxDepth else {
            throw reader.error(.nestingTooDeep, "maps and arrays nest deeper than \(maxDepth) levels")
        }
    }

    func checkInt64(_ argument: UInt64, negative: Bool) throws(ValueSetError) {
        guard argument <= UInt64(Int64.max) else {
            let text = negative ? "-\(argument)-1" : "\(argument)"
            throw reader.error(.notAValueSet, "integer \(text) is outside the Int64 range")
        }
    }

    /// Walks the items of an array or the entries of a map whose head has been read: `body`
    /// is called once per item (or entry) with its position; it reads the item itself.
    mutating func forEachItem(
        _ head: CBORReader.Head,
        _ body: (inout Self, Int) throws(ValueSetError) -> Void
    ) throws(ValueSetError) {
        if head.isIndefinite {
            var position = 0
            while !reader.consumeBreak() {
                try body(&self, position)
                position += 1
            }
        } else {
            try reader.need(head.argument)  // each item takes a byte at least: refuse impossible counts early
            for position in 0..<Int(head.argument) {
                try body(&self, position)
            }
        }
    }
}

/// Decodes ``Value``s from CBOR, checking every rule of CONTRACT section 3 as it goes.
/// Errors carry the path of the offending value, added level by level as they unwind.
struct ValueReader: ValueWalker {
    var reader: CBORReader
    let maxDepth: Int
    /// Containers are read as little as their kind needs: an array as its first element, a
    /// map as empty (``ValueSet/init(outline:)``).
    var outline = false

    init(_ bytes: UnsafeRawBufferPointer, limits: DecodingLimits) {
        reader = CBORReader(bytes, budget: limits.maxBytes)
        maxDepth = limits.maxDepth
    }

    /// Throws unless every byte of the input was consumed.
    func checkAtEnd() throws(ValueSetError) {
        guard reader.isAtEnd else {
            throw reader.error(.notWellFormed, "\(reader.remaining) bytes after the end of the value")
        }
        if reader.limitIsBudget {
            throw reader.error(.tooLarge, "the value is longer than the limit of \(reader.limit) bytes")
        }
    }

    /// Decodes the item at the cursor, which must be a map: a whole message.
    mutating func readValueSet() throws(ValueSetError) -> ValueSet {
        let head = try reader.readHead()
        guard head.major == 5 else {
            reader.offset = 0
            throw reader.error(.notAValueSet, "a ValueSet must be a map, not \(head.kindDescription)")
        }
        return try readMap(head, depth: 1)
    }

    /// Decodes the item at the cursor; containers in it start at level `depth + 1`.
    mutating func readValue(depth: Int) throws(ValueSetError) -> Value {
        let start = reader.offset
        let head = try reader.readHead()
        if outline, head.major == 4 || head.major == 5 {
            var first: Value?
            if head.major == 4, head.isIndefinite ? reader.peekByte() != 0xff : head.argument > 0 {
                first = try readValue(depth: depth + 1)
            }
            reader.offset = start
            try reader.skipItem(maxDepth: maxDepth + 1)
            if head.major == 5 { return .map(ValueSet()) }
            return .array(ValueArray(homogeneous: first.map { [$0] } ?? []))
        }
        switch head.major {
        case 0:
            return .int(try int64(head.argument, negative: false))
        case 1:
            return .int(try int64(head.argument, negative: true))
        case 2:
            return .bytes(try readBytes(head))
        case 3:
            return .string(try reader.readText(head))
        case 4:
            return .array(try readArray(head, depth: depth + 1))
        case 5:
            return .map(try readMap(head, depth: depth + 1))
        case 6:
            return try readTagged(head)
        default:
            return try readSimple(head)
        }
    }

    func int64(_ argument: UInt64, negative: Bool) throws(ValueSetError) -> Int64 {
        try checkInt64(argument, negative: negative)
        return negative ? ~Int64(argument) : Int64(argument)
    }

    mutating func readBytes(_ head: CBORReader.Head) throws(ValueSetError) -> [UInt8] {
        if !head.isIndefinite {
            return Array(try reader.readSpan(head.argument))
        }
        var bytes: [UInt8] = []
        while !reader.consumeBreak() {
            bytes.append(contentsOf: try reader.readChunk(of: 2))
        }
        return bytes
    }

    mutating func readArray(_ head: CBORReader.Head, depth: Int) throws(ValueSetError) -> ValueArray {
        try checkDepth(depth)
        var values: [Value] = []
        if !head.isIndefinite { values.reserveCapacity(Int(min(head.argument, UInt64(reader.remaining)))) }
        try forEachItem(head) { (this: inout ValueReader, position) throws(ValueSetError) in
            if let next = this.reader.peekByte(), next >> 5 == 4 {
                throw this.reader.error(.notAValueSet, "an array may not hold arrays").inside(.index(position))
            }
            let value: Value
            do throws(ValueSetError) {
                value = try this.readValue(depth: depth)
            } catch {
                throw error.inside(.index(position))
            }
            if let first = values.first, first.kind != value.kind {
                throw this.reader.error(.notAValueSet, "array mixes \(first.kind) and \(value.kind)")
                    .inside(.index(position))
            }
            values.append(value)
        }
        return ValueArray(homogeneous: values)
    }

    mutating func readMap(_ head: CBORReader.Head, depth: Int) throws(ValueSetError) -> ValueSet {
        try checkDepth(depth)
        var set = ValueSet(
            minimumCapacity: head.isIndefinite ? 0 : Int(min(head.argument, UInt64(reader.remaining / 2))))
        try forEachItem(head) { (this: inout ValueReader, position) throws(ValueSetError) in
            let keyStart = this.reader.offset
            let keyHead = try this.reader.readHead()
            guard keyHead.major == 3 else {
                if keyHead.isBreak {
                    this.reader.offset = keyStart
                    throw this.reader.error(.notWellFormed, "a break (0xff) outside an indefinite-length item")
                }
                this.reader.offset = keyStart
                throw this.reader.error(
                    .notAValueSet,
                    "map keys must be text, but key \(position + 1) is \(keyHead.kindDescription)"
                )
            }
            let key = try this.reader.readText(keyHead)
            if set.position(of: key) != nil {
                this.reader.offset = keyStart
                throw this.reader.error(.notAValueSet, "duplicate key \(quoted(key))")
            }
            let value: Value
            do throws(ValueSetError) {
                value = try this.readValue(depth: depth)
            } catch {
                throw error.inside(.key(key))
            }
            set.appendNew(key, value)
        }
        return set
    }

    mutating func readTagged(_ head: CBORReader.Head) throws(ValueSetError) -> Value {
        let start = reader.offset
        switch head.argument {
        case 1:
            let content = try reader.readHead()
            let seconds: Double
            switch content.major {
            case 0, 1:
                seconds = Double(try int64(content.argument, negative: content.major == 1))
            case 7 where content.info >= 25 && content.info <= 27:
                seconds = float(content)
            default:
                reader.offset = start
                throw reader.error(
                    .notAValueSet, "tag 1 (date) must hold an integer or a float, not \(content.kindDescription)")
            }
            return .date(Timestamp(secondsSince1970: seconds))
        case 37:
            let content = try reader.readHead()
            guard content.major == 2 else {
                reader.offset = start
                throw reader.error(
                    .notAValueSet, "tag 37 (uuid) must hold a byte string, not \(content.kindDescription)")
            }
            let bytes = try readBytes(content)
            guard bytes.count == 16 else {
                reader.offset = start
                throw reader.error(.notAValueSet, "tag 37 (uuid) must hold 16 bytes, not \(bytes.count)")
            }
            let uuid = UUID(
                uuid: (
                    bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                    bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
                ))
            return .uuid(uuid)
        default:
            reader.offset = start
            throw reader.error(
                .notAValueSet,
                "tag \(head.argument) is not a ValueSet kind (only tag 1, date, and tag 37, uuid)"
            )
        }
    }

    func float(_ head: CBORReader.Head) -> Double {
        switch head.info {
        case 25: doubleFromHalf(UInt16(truncatingIfNeeded: head.argument))
        case 26: Double(Float(bitPattern: UInt32(truncatingIfNeeded: head.argument)))
        default: Double(bitPattern: head.argument)
        }
    }

    mutating func readSimple(_ head: CBORReader.Head) throws(ValueSetError) -> Value {
        switch head.info {
        case 20: return .bool(false)
        case 21: return .bool(true)
        case 25, 26, 27: return .double(float(head))
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

extension ValueArray {
    /// Builds typed storage from values already known to share one kind other than array.
    init(homogeneous values: [Value]) {
        guard let first = values.first else {
            self.init()
            return
        }
        switch first.kind {
        case .string: self.init(strings: values.map { $0.string! })
        case .int: self.init(ints: values.map { $0.int! })
        case .double: self.init(doubles: values.map { $0.double! })
        case .bool: self.init(bools: values.map { $0.bool! })
        case .date: self.init(dates: values.map { $0.timestamp! })
        case .uuid: self.init(uuids: values.map { $0.uuid! })
        case .bytes: self.init(bytes: values.map { $0.bytes! })
        case .map: self.init(maps: values.map { $0.map! })
        case .array: preconditionFailure("arrays of arrays are refused before this point")
        }
    }
}

// MARK: - Public entry points

extension ValueSet {
    /// Decodes a message from the CBOR in `bytes`, which must hold exactly one map and
    /// nothing after it. The bytes are read in place, not copied.
    ///
    /// - Parameters:
    ///   - limits: nesting depth (32 by default, as CONTRACT section 3 requires) and a byte
    ///     budget, both enforced while decoding.
    ///   - root: the name of the root in error paths (`message.items[3]: ...`).
    /// - Throws: ``ValueSetError`` naming the path of the offending value and the reason.
    public init(cbor bytes: UnsafeRawBufferPointer, limits: DecodingLimits = .default, root: String = "message")
        throws(ValueSetError)
    {
        var reader = ValueReader(bytes, limits: limits)
        do {
            self = try reader.readValueSet()
            try reader.checkAtEnd()
        } catch {
            var named = error
            named.root = root
            throw named
        }
    }

    /// Decodes a message from the CBOR in `bytes`; see ``init(cbor:limits:root:)-(UnsafeRawBufferPointer,_,_)``.
    public init(cbor bytes: [UInt8], limits: DecodingLimits = .default, root: String = "message")
        throws(ValueSetError)
    {
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(ValueSetError) -> ValueSet in try ValueSet(cbor: raw, limits: limits, root: root) }
        }
        self = try result.get()
    }
}

extension ValueSet {
    /// The outline of a message whose CBOR in `bytes` is a valid ValueSet: its keys, each with
    /// a value of the same kind, scalars whole, an array as its first element alone, a map
    /// as empty. What checking a message's keys and kinds needs, at the cost of its top level,
    /// not of all it nests.
    ///
    /// - Throws: ``ValueSetError`` when `bytes` is not a ValueSet (not every rule inside
    ///   containers is checked: validate first).
    public init(outline bytes: UnsafeRawBufferPointer) throws(ValueSetError) {
        var reader = ValueReader(bytes, limits: .default)
        reader.outline = true
        self = try reader.readValueSet()
        try reader.checkAtEnd()
    }
}

extension Value {
    /// Decodes one value of any ValueSet kind (not only a map) from `bytes`, which must hold
    /// exactly that item. The outermost array or map is level 1 for `limits.maxDepth`.
    ///
    /// - Throws: ``ValueSetError`` naming the path of the offending value and the reason.
    public init(cbor bytes: UnsafeRawBufferPointer, limits: DecodingLimits = .default, root: String = "value")
        throws(ValueSetError)
    {
        var reader = ValueReader(bytes, limits: limits)
        do {
            self = try reader.readValue(depth: 0)
            try reader.checkAtEnd()
        } catch {
            var named = error
            named.root = root
            throw named
        }
    }

    /// Decodes one value from `bytes`; see ``init(cbor:limits:root:)-(UnsafeRawBufferPointer,_,_)``.
    public init(cbor bytes: [UInt8], limits: DecodingLimits = .default, root: String = "value") throws(ValueSetError) {
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(ValueSetError) -> Value in try Value(cbor: raw, limits: limits, root: root) }
        }
        self = try result.get()
    }
}
