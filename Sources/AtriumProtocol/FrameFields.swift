@_spi(CBOR) import AtriumValues
import NIOCore

/// The keys of one CBOR map inside a frame, with typed readers that say exactly which key
/// is missing or mistyped. Lives only inside ``FrameFields/parse(_:_:)``'s closure, because it
/// points into the frame's bytes.
///
/// One pass over the frame finds its keys and where each value lies, checking that the map is
/// well-formed as it goes; a key is kept as where its bytes are (every key a frame defines is
/// short ASCII), and looked up by comparing bytes, so reading a frame makes no string for its
/// keys, and its entries hold no reference (copying or dropping them counts nothing). Only a
/// refused frame is walked twice, to say what it breaks first (see `parse`).
struct FrameFields {
    /// The prefix of every error message for a nested map (`welcome.limits`); nil for a
    /// frame, whose errors are prefixed with its type (see ``name``).
    private let given: String?
    let raw: UnsafeRawBufferPointer
    let body: ByteBuffer
    let entries: [Entry]
    /// The text of each key that is not ASCII or came in chunks (none, in any frame this
    /// module writes), read once; a key's ``Key/text`` is its index here.
    let keyTexts: [String]
    /// Where the map ends in `raw`.
    let end: Int

    /// One key and where its value lies in `raw`.
    struct Entry {
        var key: Key
        var value: Range<Int>
    }

    /// A key: where its bytes are in `raw`, for a definite-length ASCII text string; else (text
    /// that is not ASCII, or sent in chunks) its place in `keyTexts`, compared as Swift compares
    /// strings.
    struct Key {
        var range: Range<Int>
        /// -1 for an ASCII key.
        var text: Int
        var isASCII: Bool { text < 0 }
    }

    /// Checks that `body` is exactly one well-formed CBOR map with text keys, then hands its
    /// fields to `build`.
    static func parse<Result>(
        _ body: ByteBuffer,
        _ build: (FrameFields) throws(FrameError) -> Result
    ) throws(FrameError) -> Result {
        guard body.readableBytes > 0 else {
            throw FrameError(.malformedFrame, "empty frame: a frame holds one CBOR map")
        }
        let outcome = body.withUnsafeReadableBytes { raw in
            Swift.Result { () throws(FrameError) -> Result in
                let fields: FrameFields
                do throws(FrameError) {
                    fields = try FrameFields(name: nil, raw: raw, body: body, at: 0)
                } catch {
                    // A frame that is not well-formed CBOR, or more than one item, is refused
                    // as such, whatever its fields break before that point.
                    try checkWhole(raw)
                    throw error
                }
                guard fields.end == raw.count else {
                    throw FrameError(.malformedFrame, "frame holds more than one CBOR item")
                }
                return try build(fields)
            }
        }
        return try outcome.get()
    }

    /// Throws when `raw` is not exactly one well-formed CBOR item within the frame nesting limit.
    private static func checkWhole(_ raw: UnsafeRawBufferPointer) throws(FrameError) {
        var reader = CBORReader(raw)
        do throws(ValueSetError) {
            try reader.skipItem(maxDepth: ProtocolLimits.maxFrameNesting)
        } catch {
            if error.code == .nestingTooDeep {
                throw FrameError(
                    .malformedFrame,
                    "frame nests deeper than \(ProtocolLimits.maxFrameNesting) levels, the hard limit"
                )
            }
            throw FrameError(
                .malformedFrame,
                "frame is not well-formed CBOR: \(error.reason) (at byte \(error.offset ?? 0))"
            )
        }
        guard reader.isAtEnd else {
            throw FrameError(.malformedFrame, "frame holds more than one CBOR item")
        }
    }

    /// The fields of the map at `offset`, checked well-formed as they are read (values within
    /// the frame nesting limit below the map). `name` prefixes the error messages of a nested
    /// map; a frame's (nil) are prefixed with its type.
    init(name given: String?, raw: UnsafeRawBufferPointer, body: ByteBuffer, at offset: Int) throws(FrameError) {
        // Read first, stored after: nothing of `self` is set while a throw may still come.
        (entries, keyTexts, end) = try Self.read(raw, at: offset, name: given ?? "frame")
        self.given = given
        self.raw = raw
        self.body = body
    }

    /// The entries of the map at `offset`, the texts of its keys that are not ASCII, and
    /// where it ends.
    private static func read(_ raw: UnsafeRawBufferPointer, at offset: Int, name: String) throws(FrameError) -> (
        [Entry], [String], Int
    ) {
        var reader = CBORReader(raw, offset: offset)
        do {
            let head = try reader.readHead()
            guard head.major == 5 else {
                throw FrameError(.malformedFrame, "\(name) must be a CBOR map, not \(head.kindDescription)")
            }
            var entries: [Entry] = []
            var keyTexts: [String] = []
            if !head.isIndefinite {
                entries.reserveCapacity(Int(min(head.argument, 16)))
            }
            // Past a few keys the duplicate check uses a set, so that a frame of many keys
            // costs time in proportion to its length, not to its square.
            var seen: Set<String> = []
            var position = 0
            while head.isIndefinite ? !reader.consumeBreak() : position < head.argument {
                position += 1
                guard position <= ProtocolLimits.maxFrameKeys else {
                    throw FrameError(
                        .malformedFrame,
                        "\(name) has more than \(ProtocolLimits.maxFrameKeys) keys, the hard limit"
                    )
                }
                let keyHead = try reader.readHead()
                guard keyHead.major == 3 else {
                    throw FrameError(
                        .malformedFrame,
                        "\(name) keys must be text, but key \(position) is \(keyHead.kindDescription)"
                    )
                }
                let key = try Self.readKey(keyHead, &reader, texts: &keyTexts)
                let duplicate: Bool
                if entries.count < 16 {
                    duplicate = entries.contains { Self.same($0.key, key, raw, keyTexts) }
                } else {
                    if seen.isEmpty { seen = Set(entries.map { Self.text(of: $0.key, raw, keyTexts) }) }
                    duplicate = !seen.insert(Self.text(of: key, raw, keyTexts)).inserted
                }
                if duplicate {
                    throw FrameError(
                        .malformedFrame, "\(name) has the key \(quotedKey(Self.text(of: key, raw, keyTexts))) twice")
                }
                let start = reader.offset
                try reader.skipItem(maxDepth: ProtocolLimits.maxFrameNesting - 1)
                entries.append(Entry(key: key, value: start..<reader.offset))
            }
            return (entries, keyTexts, reader.offset)
        } catch let error as FrameError {
            throw error
        } catch let error as ValueSetError {
            // A frame's own map was checked whole by now; what gets here in it is text that is
            // not UTF-8 (`parse` says so when the frame is not well-formed).
            throw FrameError(.malformedFrame, "\(name): \(error.reason)")
        } catch {
            throw FrameError(.malformedFrame, "\(name): \(error)")
        }
    }

    /// Reads a key whose head has been read: its place when it is definite-length ASCII, else
    /// its text (checked UTF-8), kept in `texts`.
    private static func readKey(
        _ head: CBORReader.Head, _ reader: inout CBORReader, texts: inout [String]
    ) throws(ValueSetError) -> Key {
        if !head.isIndefinite {
            let start = reader.offset
            let bytes = try reader.readSpan(head.argument)
            if isASCII(bytes) {
                return Key(range: start..<reader.offset, text: -1)
            }
            reader.offset = start
        }
        texts.append(try reader.readText(head))
        return Key(range: 0..<0, text: texts.count - 1)
    }

    /// A key's text.
    private static func text(of key: Key, _ raw: UnsafeRawBufferPointer, _ texts: [String]) -> String {
        key.isASCII ? String(decoding: raw[key.range], as: UTF8.self) : texts[key.text]
    }

    /// Whether two keys are the same key: ASCII byte for byte, anything else as Swift's
    /// strings compare (canonical equivalence).
    private static func same(_ a: Key, _ b: Key, _ raw: UnsafeRawBufferPointer, _ texts: [String]) -> Bool {
        if a.isASCII, b.isASCII {
            return sameBytes(
                UnsafeRawBufferPointer(rebasing: raw[a.range]), UnsafeRawBufferPointer(rebasing: raw[b.range]))
        }
        return text(of: a, raw, texts) == text(of: b, raw, texts)
    }

    /// Whether `key` is the field whose name is `utf8` (an ASCII name this module reads).
    @inline(__always)
    private func matches(_ key: Key, _ utf8: UnsafeRawBufferPointer) -> Bool {
        if key.isASCII {
            return sameBytes(UnsafeRawBufferPointer(rebasing: raw[key.range]), utf8)
        }
        return keyTexts[key.text] == String(decoding: utf8, as: UTF8.self)
    }

    /// The frame's `type`.
    func frameType() throws(FrameError) -> String {
        guard let type = try optionalText("type") else {
            throw FrameError(.malformedFrame, "frame has no \"type\" key")
        }
        return type
    }

    /// The prefix of every error message: `request`, say, for a frame (its type, read only
    /// when an error needs it; `frame` while it has none that is text), or `welcome.limits`
    /// for a nested map.
    var name: String {
        if let given { return given }
        guard let (head, found) = head("type"), head.major == 3 else { return "frame" }
        var reader = found
        return (try? reader.readText(head)) ?? "frame"
    }

    /// Where the value of `key` lies, or nil when the frame has no such key.
    func range(_ key: StaticString) -> Range<Int>? {
        // A one-character literal may be held as a scalar, not as bytes (`withUTF8Buffer`).
        guard key.hasPointerRepresentation else {
            return key.withUTF8Buffer { range(UnsafeRawBufferPointer($0)) }
        }
        return range(UnsafeRawBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount))
    }

    private func range(_ utf8: UnsafeRawBufferPointer) -> Range<Int>? {
        for entry in entries where matches(entry.key, utf8) { return entry.value }
        return nil
    }

    func missing(_ key: StaticString) -> FrameError {
        FrameError(.malformedFrame, "\(name): key \"\(key)\" is missing")
    }

    func mistyped(_ key: StaticString, _ expected: String, _ head: CBORReader.Head) -> FrameError {
        FrameError(.malformedFrame, "\(name): key \"\(key)\" must be \(expected), not \(head.kindDescription)")
    }

    /// The head of `key`'s value and a reader just past it, or `nil` when the key is absent.
    func head(_ key: StaticString) -> (CBORReader.Head, CBORReader)? {
        range(key).flatMap(head(at:))
    }

    /// The head of the value at `range` and a reader just past it.
    private func head(at range: Range<Int>) -> (CBORReader.Head, CBORReader)? {
        var reader = CBORReader(raw, offset: range.lowerBound)
        guard let head = try? reader.readHead() else { return nil }  // checked well-formed already
        return (head, reader)
    }

    func optionalUInt(_ key: StaticString) throws(FrameError) -> UInt64? {
        guard let (head, _) = head(key) else { return nil }
        guard head.major == 0 else { throw mistyped(key, "an unsigned integer", head) }
        return head.argument
    }

    func uint(_ key: StaticString) throws(FrameError) -> UInt64 {
        guard let value = try optionalUInt(key) else { throw missing(key) }
        return value
    }

    /// An unsigned integer that must fit `Int` (statuses, limits).
    func int(_ key: StaticString) throws(FrameError) -> Int {
        let value = try uint(key)
        guard let int = Int(exactly: value) else {
            throw FrameError(.malformedFrame, "\(name): key \"\(key)\" is out of range (\(value))")
        }
        return int
    }

    func optionalText(_ key: StaticString) throws(FrameError) -> String? {
        guard let (head, found) = head(key) else { return nil }
        var reader = found
        guard head.major == 3 else { throw mistyped(key, "text", head) }
        do throws(ValueSetError) {
            return try reader.readText(head)
        } catch {
            throw FrameError(.malformedFrame, "\(name): key \"\(key)\": \(error.reason)")
        }
    }

    func text(_ key: StaticString) throws(FrameError) -> String {
        guard let value = try optionalText(key) else { throw missing(key) }
        return value
    }

    /// Visits the elements of the array under `key`; `nil` when the key is absent.
    func optionalArray<Element>(
        _ key: StaticString,
        _ expected: String,
        _ element: (inout CBORReader, Int) throws(FrameError) -> Element
    ) throws(FrameError) -> [Element]? {
        guard let (head, found) = head(key) else { return nil }
        var reader = found
        guard head.major == 4 else { throw mistyped(key, expected, head) }
        var elements: [Element] = []
        var position = 0
        while head.isIndefinite ? !reader.consumeBreak() : position < head.argument {
            elements.append(try element(&reader, position))
            position += 1
        }
        return elements
    }

    /// Visits the elements of the array under `key`, refusing the frame past
    /// ``ProtocolLimits/maxFrameArrayItems`` of them; `nil` when the key is absent.
    func optionalLimitedArray<Element>(
        _ key: StaticString,
        _ expected: String,
        _ element: (inout CBORReader, Int) throws(FrameError) -> Element
    ) throws(FrameError) -> [Element]? {
        try optionalArray(key, expected) { (reader, position) throws(FrameError) in
            guard position < ProtocolLimits.maxFrameArrayItems else {
                throw FrameError(
                    .malformedFrame,
                    "\(name): key \"\(key)\" has more than \(ProtocolLimits.maxFrameArrayItems) items, the hard limit")
            }
            return try element(&reader, position)
        }
    }

    func optionalTextArray(_ key: StaticString) throws(FrameError) -> [String]? {
        try optionalLimitedArray(key, "an array of text") { (reader, position) throws(FrameError) in
            let start = reader.offset
            guard let head = try? reader.readHead(), head.major == 3, let text = try? reader.readText(head) else {
                var probe = CBORReader(raw, offset: start)
                let what = (try? probe.readHead())?.kindDescription ?? "invalid text"
                throw FrameError(.malformedFrame, "\(name): key \"\(key)\"[\(position)] must be text, not \(what)")
            }
            return text
        }
    }

    func textArray(_ key: StaticString) throws(FrameError) -> [String] {
        guard let value = try optionalTextArray(key) else { throw missing(key) }
        return value
    }

    /// The map under `key` as a message: a slice of the frame, not decoded.
    func optionalMessage(_ key: StaticString) throws(FrameError) -> EncodedValueSet? {
        guard let range = range(key), let (head, _) = head(at: range) else { return nil }
        guard head.major == 5 else { throw mistyped(key, "a map (a ValueSet)", head) }
        let slice = body.getSlice(at: body.readerIndex + range.lowerBound, length: range.count)!
        // A slice keeps the whole read buffer alive. When the frame is much larger than its
        // message (padded with unknown keys, say), copy the message, so that what a request in
        // flight holds is what its message counts for.
        if body.readableBytes > 2 * range.count + 4096 {
            return EncodedValueSet(uncheckedBytes: ByteBuffer(bytes: slice.readableBytesView))
        }
        return EncodedValueSet(uncheckedBytes: slice)
    }

    func message(_ key: StaticString) throws(FrameError) -> EncodedValueSet {
        guard let value = try optionalMessage(key) else { throw missing(key) }
        return value
    }

    /// The fields of the map under `key`.
    func map(_ key: StaticString) throws(FrameError) -> FrameFields {
        guard let fields = try optionalMap(key) else { throw missing(key) }
        return fields
    }

    /// The fields of the map under `key`, if there is one.
    func optionalMap(_ key: StaticString) throws(FrameError) -> FrameFields? {
        guard let range = range(key) else { return nil }
        return try FrameFields(name: "\(name).\(key)", raw: raw, body: body, at: range.lowerBound)
    }

    /// The fields of each map in the array under `key`.
    func arrayOfMaps(_ key: StaticString) throws(FrameError) -> [FrameFields] {
        // Once, not per map: a frame's `name` reads its `type`, which a hostile peer can make
        // long (in a million chunks, say) while the array holds millions of maps.
        let path = "\(name).\(key)"
        let maps = try optionalArray(key, "an array of maps") { (reader, position) throws(FrameError) in
            let start = reader.offset
            try? reader.skipItem(maxDepth: ProtocolLimits.maxFrameNesting)
            return try FrameFields(name: "\(path)[\(position)]", raw: raw, body: body, at: start)
        }
        guard let maps else { throw missing(key) }
        return maps
    }
}

/// A key from a frame, quoted for an error message: at most 64 characters, control and
/// invisible characters escaped (the message goes back to the client and into the log).
func quotedKey(_ key: String) -> String {
    var text = "\""
    var count = 0
    for scalar in key.unicodeScalars {
        if count == 64 { return text + "…\"" }
        count += 1
        if scalar.value < 0x20 || (0x7f...0x9f).contains(scalar.value) || scalar == "\"" || scalar == "\\"
            || scalar.properties.isBidiControl || scalar.properties.isDefaultIgnorableCodePoint
        {
            text += "\\u{" + String(scalar.value, radix: 16) + "}"
        } else {
            text.unicodeScalars.append(scalar)
        }
    }
    return text + "\""
}
