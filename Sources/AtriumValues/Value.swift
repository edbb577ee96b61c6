#if canImport(FoundationEssentials)
    public import FoundationEssentials
#else
    public import Foundation
#endif

/// One value inside a ``ValueSet``: exactly the kinds that Windows' `ValueSet` carries and
/// that the Atrium wire format (CONTRACT section 3) can encode.
///
/// `Value` is a plain value type: `Sendable`, `Hashable`, and safe to share across threads.
/// Build one with a literal (`"text"`, `3`, `2.5`, `true`, `["a", "b"]`, `["key": 1]`) or
/// with a case, and read it back with the typed accessors (`value.int`, `value.string`, ...),
/// which return `nil` for any other kind.
///
/// Equality follows the values, not their encodings: a `double` NaN equals any NaN (so that
/// `Value` is a lawful `Hashable`), and `0.0 == -0.0` as in IEEE 754.
public enum Value: Sendable {
    /// A Unicode string (CBOR text string).
    case string(String)
    /// A 64-bit signed integer (CBOR major types 0 and 1 within the Int64 range).
    case int(Int64)
    /// A double (CBOR float16, float32 or float64 on the wire).
    case double(Double)
    /// A boolean (CBOR simple values `true` and `false`).
    case bool(Bool)
    /// A point in time (CBOR tag 1 over seconds since 1970-01-01 UTC), kept exactly.
    case date(Timestamp)
    /// A UUID (CBOR tag 37 over a 16-byte byte string).
    case uuid(UUID)
    /// Raw bytes (CBOR byte string).
    case bytes([UInt8])
    /// A homogeneous array: all elements of one scalar kind, or all maps.
    case array(ValueArray)
    /// A nested ValueSet.
    case map(ValueSet)

    /// The kinds a ``Value`` can have, named as they are in error messages.
    public enum Kind: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
        case string, int, double, bool, date, uuid, bytes, array, map
        public var description: String { rawValue }
    }

    /// The kind of this value.
    public var kind: Kind {
        switch self {
        case .string: .string
        case .int: .int
        case .double: .double
        case .bool: .bool
        case .date: .date
        case .uuid: .uuid
        case .bytes: .bytes
        case .array: .array
        case .map: .map
        }
    }
}

// MARK: - Typed accessors

extension Value {
    /// The string, when this is a `string`; otherwise `nil`.
    public var string: String? {
        if case .string(let v) = self { return v }
        return nil
    }

    /// The integer, when this is an `int`; otherwise `nil`.
    public var int: Int64? {
        if case .int(let v) = self { return v }
        return nil
    }

    /// The double, when this is a `double`; otherwise `nil`. An `int` is not converted: use
    /// ``number`` to accept both.
    public var double: Double? {
        if case .double(let v) = self { return v }
        return nil
    }

    /// The value as a `Double` when this is a `double` or an `int`; otherwise `nil`.
    public var number: Double? {
        switch self {
        case .double(let v): v
        case .int(let v): Double(v)
        default: nil
        }
    }

    /// The boolean, when this is a `bool`; otherwise `nil`.
    public var bool: Bool? {
        if case .bool(let v) = self { return v }
        return nil
    }

    /// The timestamp, when this is a `date`; otherwise `nil`.
    public var timestamp: Timestamp? {
        if case .date(let v) = self { return v }
        return nil
    }

    /// The date as a Foundation `Date`, when this is a `date`; otherwise `nil`.
    public var date: Date? { timestamp?.date }

    /// The UUID, when this is a `uuid`; otherwise `nil`.
    public var uuid: UUID? {
        if case .uuid(let v) = self { return v }
        return nil
    }

    /// The bytes, when this is `bytes`; otherwise `nil`.
    public var bytes: [UInt8]? {
        if case .bytes(let v) = self { return v }
        return nil
    }

    /// The array, when this is an `array`; otherwise `nil`.
    public var array: ValueArray? {
        if case .array(let v) = self { return v }
        return nil
    }

    /// The nested ValueSet, when this is a `map`; otherwise `nil`.
    public var map: ValueSet? {
        if case .map(let v) = self { return v }
        return nil
    }
}

// MARK: - Equatable, Hashable

extension Value: Hashable {
    public static func == (lhs: Value, rhs: Value) -> Bool {
        switch (lhs, rhs) {
        case (.string(let a), .string(let b)): a == b
        case (.int(let a), .int(let b)): a == b
        case (.double(let a), .double(let b)): sameDouble(a, b)
        case (.bool(let a), .bool(let b)): a == b
        case (.date(let a), .date(let b)): a == b
        case (.uuid(let a), .uuid(let b)): a == b
        case (.bytes(let a), .bytes(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.map(let a), .map(let b)): a == b
        default: false
        }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(kind)
        switch self {
        case .string(let v): hasher.combine(v)
        case .int(let v): hasher.combine(v)
        case .double(let v): hashDouble(v, into: &hasher)
        case .bool(let v): hasher.combine(v)
        case .date(let v): hasher.combine(v)
        case .uuid(let v): hasher.combine(v)
        case .bytes(let v): hasher.combine(v)
        case .array(let v): hasher.combine(v)
        case .map(let v): hasher.combine(v)
        }
    }
}

/// Doubles compare as IEEE 754 values, except that every NaN equals every NaN, which keeps
/// `==` reflexive and `Hashable` lawful.
@inlinable
func sameDouble(_ a: Double, _ b: Double) -> Bool {
    a == b || (a.isNaN && b.isNaN)
}

@inlinable
func hashDouble(_ d: Double, into hasher: inout Hasher) {
    hasher.combine(d.isNaN ? Double.nan : d)
}

// MARK: - Literals

extension Value: ExpressibleByStringLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
}

extension Value: ExpressibleByIntegerLiteral {
    public init(integerLiteral value: Int64) { self = .int(value) }
}

extension Value: ExpressibleByFloatLiteral {
    public init(floatLiteral value: Double) { self = .double(value) }
}

extension Value: ExpressibleByBooleanLiteral {
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

extension Value: ExpressibleByArrayLiteral {
    /// An array literal must be homogeneous (`[1, 2, 3]`, `["a", "b"]`, `[["k": 1], ["k": 2]]`);
    /// a mixed literal is a programming error and stops the program, as a duplicate key in a
    /// `Dictionary` literal does. Use ``ValueArray/init(_:)`` to check values at run time.
    public init(arrayLiteral elements: Value...) {
        self = .array(ValueArray(literal: elements))
    }
}

extension Value: ExpressibleByDictionaryLiteral {
    public init(dictionaryLiteral elements: (String, Value)...) {
        self = .map(ValueSet(literal: elements))
    }
}
