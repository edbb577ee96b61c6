/// A message: a map from text keys to ``Value``s, as Windows' `ValueSet` is.
///
/// Keys keep the order in which they were first inserted (or decoded), so a message prints
/// and encodes the way it was written; equality and hashing ignore that order, as they do for
/// a dictionary. Lookups are linear for small sets (the common case, a handful of keys) and
/// go through a hash index once a set grows past ``indexThreshold`` keys, so large or hostile
/// maps cost O(1) per key, not O(n).
///
/// `ValueSet` is a value type: `Sendable`, `Hashable`, copy-on-write.
///
/// ```swift
/// var message: ValueSet = ["Type": "ping", "Count": 3]
/// message["TargetId"] = "phone"
/// let count = message["Count"]?.int  // 3
/// ```
public struct ValueSet: Sendable {
    /// One key and its value.
    public struct Entry: Sendable, Hashable {
        public var key: String
        public var value: Value
    }

    /// The number of keys above which lookups use a hash index.
    public static let indexThreshold = 12

    @usableFromInline var entries: [Entry]
    @usableFromInline var index: [String: Int]?

    /// An empty ValueSet.
    public init() {
        entries = []
        index = nil
    }

    /// An empty ValueSet with room for `minimumCapacity` keys.
    public init(minimumCapacity: Int) {
        entries = []
        entries.reserveCapacity(minimumCapacity)
        index = nil
    }

    /// The number of keys.
    public var count: Int { entries.count }

    /// Whether there are no keys.
    public var isEmpty: Bool { entries.isEmpty }

    /// The keys, in insertion order.
    public var keys: [String] { entries.map(\.key) }

    /// The position of `key` in ``entries``, if present.
    func position(of key: String) -> Int? {
        if let index { return index[key] }
        return entries.firstIndex { $0.key == key }
    }

    /// The value for `key`, or `nil`. Setting `nil` removes the key.
    public subscript(key: String) -> Value? {
        get { position(of: key).map { entries[$0].value } }
        set {
            if let newValue {
                updateValue(newValue, forKey: key)
            } else {
                removeValue(forKey: key)
            }
        }
    }

    /// Sets the value for `key`, keeping the key's position if it was present.
    ///
    /// - Returns: the value that was replaced, or `nil` if the key is new.
    @discardableResult
    public mutating func updateValue(_ value: Value, forKey key: String) -> Value? {
        if let at = position(of: key) {
            let old = entries[at].value
            entries[at].value = value
            return old
        }
        appendNew(key, value)
        return nil
    }

    /// Appends a key that the caller knows is absent.
    mutating func appendNew(_ key: String, _ value: Value) {
        entries.append(Entry(key: key, value: value))
        if index != nil {
            index![key] = entries.count - 1
        } else if entries.count > Self.indexThreshold {
            rebuildIndex()
        }
    }

    /// Removes `key`.
    ///
    /// - Returns: the removed value, or `nil` if the key was absent.
    @discardableResult
    public mutating func removeValue(forKey key: String) -> Value? {
        guard let at = position(of: key) else { return nil }
        let old = entries.remove(at: at).value
        if index != nil { rebuildIndex() }
        return old
    }

    @usableFromInline
    mutating func rebuildIndex() {
        guard entries.count > Self.indexThreshold else {
            index = nil
            return
        }
        var built = [String: Int](minimumCapacity: entries.count)
        for (at, entry) in entries.enumerated() {
            built[entry.key] = at
        }
        index = built
    }
}

extension ValueSet: Sequence {
    public typealias Element = (key: String, value: Value)

    /// Iterates the keys and values in insertion order.
    public struct Iterator: IteratorProtocol {
        var base: IndexingIterator<[Entry]>
        public mutating func next() -> (key: String, value: Value)? {
            base.next().map { ($0.key, $0.value) }
        }
    }

    public func makeIterator() -> Iterator { Iterator(base: entries.makeIterator()) }

    public var underestimatedCount: Int { entries.count }
}

extension ValueSet: Hashable {
    /// Two sets are equal when they have the same keys with equal values, in any order.
    public static func == (lhs: ValueSet, rhs: ValueSet) -> Bool {
        guard lhs.count == rhs.count else { return false }
        for entry in lhs.entries {
            guard let other = rhs[entry.key], other == entry.value else { return false }
        }
        return true
    }

    /// Order-independent, consistent with `==`.
    public func hash(into hasher: inout Hasher) {
        var combined = 0
        for entry in entries {
            var entryHasher = Hasher()
            entryHasher.combine(entry)
            combined ^= entryHasher.finalize()
        }
        hasher.combine(entries.count)
        hasher.combine(combined)
    }
}

extension ValueSet: ExpressibleByDictionaryLiteral {
    /// A duplicate key in the literal is a programming error and stops the program, as it does
    /// for a `Dictionary` literal.
    public init(dictionaryLiteral elements: (String, Value)...) {
        self.init(literal: elements)
    }

    init(literal elements: [(String, Value)]) {
        self.init(minimumCapacity: elements.count)
        for (key, value) in elements {
            precondition(updateValue(value, forKey: key) == nil, "duplicate key \"\(key)\" in a ValueSet literal")
        }
    }
}
