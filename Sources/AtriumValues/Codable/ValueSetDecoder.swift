#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Decodes a `Decodable` type from a ``ValueSet``: the reverse of ``ValueSetEncoder``.
///
/// Kinds must match, with two conversions that lose nothing: an `int` is accepted for a
/// `Double` or `Float` when it converts exactly, and an `int` for any integer type it fits.
/// A missing key decodes as `nil` for an optional property.
///
/// - Throws: `DecodingError` with the coding path: `keyNotFound`, `typeMismatch` (naming
///   the kind found), or `dataCorrupted` for an integer that does not fit the property.
public struct ValueSetDecoder: Sendable {
    /// Passed to `Decodable.init(from:)` as `decoder.userInfo`.
    public var userInfo: [CodingUserInfoKey: any Sendable] = [:]

    public init() {}

    public func decode<T: Decodable>(_ type: T.Type, from set: ValueSet) throws -> T {
        try ValueDecoding(value: .map(set), codingPath: [], userInfo: userInfo).decode(type)
    }
}

struct ValueDecoding: Decoder {
    let value: Value
    let codingPath: [any CodingKey]
    let userInfoSendable: [CodingUserInfoKey: any Sendable]
    var userInfo: [CodingUserInfoKey: Any] { userInfoSendable }

    init(value: Value, codingPath: [any CodingKey], userInfo: [CodingUserInfoKey: any Sendable]) {
        self.value = value
        self.codingPath = codingPath
        self.userInfoSendable = userInfo
    }

    func mismatch(_ type: Any.Type, _ expected: String) -> DecodingError {
        .typeMismatch(
            type,
            .init(codingPath: codingPath, debugDescription: "expected \(expected), found \(value.kind) \(value)")
        )
    }

    func child(_ value: Value, _ key: any CodingKey) -> ValueDecoding {
        ValueDecoding(value: value, codingPath: codingPath + [key], userInfo: userInfoSendable)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .map(let set) = value else { throw mismatch(ValueSet.self, "a map") }
        return KeyedDecodingContainer(KeyedValueContainer<Key>(decoder: self, values: set))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let array) = value else { throw mismatch(ValueArray.self, "an array") }
        return UnkeyedValueContainer(decoder: self, array: array)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        switch type {
        case is Date.Type:
            guard case .date(let date) = value else { throw mismatch(type, "a date") }
            return date.date as! T
        case is Timestamp.Type:
            guard case .date(let date) = value else { throw mismatch(type, "a date") }
            return date as! T
        case is UUID.Type:
            guard case .uuid(let uuid) = value else { throw mismatch(type, "a uuid") }
            return uuid as! T
        case is Data.Type:
            guard case .bytes(let bytes) = value else { throw mismatch(type, "bytes") }
            return Data(bytes) as! T
        case is [UInt8].Type:
            guard case .bytes(let bytes) = value else { throw mismatch(type, "bytes") }
            return bytes as! T
        default:
            return try T(from: self)
        }
    }

    func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        guard case .int(let int) = value else { throw mismatch(type, "an int") }
        guard let converted = T(exactly: int) else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: codingPath, debugDescription: "\(int) does not fit \(type)")
            )
        }
        return converted
    }

    func floating<T: BinaryFloatingPoint>(_ type: T.Type) throws -> T {
        switch value {
        case .double(let double):
            return T(double)
        case .int(let int):
            guard let converted = T(exactly: int) else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: codingPath, debugDescription: "\(int) has no exact \(type) value")
                )
            }
            return converted
        default:
            throw mismatch(type, "a double")
        }
    }
}

extension ValueDecoding: SingleValueDecodingContainer {
    func decodeNil() -> Bool { false }
    func decode(_ type: Bool.Type) throws -> Bool {
        guard case .bool(let bool) = value else { throw mismatch(type, "a bool") }
        return bool
    }
    func decode(_ type: String.Type) throws -> String {
        guard case .string(let string) = value else { throw mismatch(type, "a string") }
        return string
    }
    func decode(_ type: Double.Type) throws -> Double { try floating(type) }
    func decode(_ type: Float.Type) throws -> Float { try floating(type) }
    func decode(_ type: Int.Type) throws -> Int { try integer(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(type) }
}

struct KeyedValueContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let decoder: ValueDecoding
    let values: ValueSet
    var codingPath: [any CodingKey] { decoder.codingPath }
    var allKeys: [Key] { values.keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { values[key.stringValue] != nil }

    func child(_ key: Key) throws -> ValueDecoding {
        guard let value = values[key.stringValue] else {
            throw DecodingError.keyNotFound(
                key,
                .init(codingPath: codingPath, debugDescription: "no value for key \(quoted(key.stringValue))")
            )
        }
        return decoder.child(value, key)
    }

    /// A ValueSet has no null: an absent key is what `nil` looks like.
    func decodeNil(forKey key: Key) throws -> Bool { !contains(key) }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try child(key).decode(type) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        try child(key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try child(key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { try child(Key(stringValue: "super")!) }
    func superDecoder(forKey key: Key) throws -> any Decoder { try child(key) }
}

struct UnkeyedValueContainer: UnkeyedDecodingContainer {
    let decoder: ValueDecoding
    let array: ValueArray
    var codingPath: [any CodingKey] { decoder.codingPath }
    var count: Int? { array.count }
    var isAtEnd: Bool { currentIndex >= array.count }
    private(set) var currentIndex = 0

    init(decoder: ValueDecoding, array: ValueArray) {
        self.decoder = decoder
        self.array = array
    }

    mutating func next() throws -> ValueDecoding {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                Value.self,
                .init(
                    codingPath: codingPath + [AnyCodingKey(currentIndex)],
                    debugDescription: "the array has only \(array.count) elements"
                )
            )
        }
        defer { currentIndex += 1 }
        return decoder.child(array[currentIndex], AnyCodingKey(currentIndex))
    }

    mutating func decodeNil() throws -> Bool { false }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next().decode(type) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        try next().container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next().unkeyedContainer() }

    mutating func superDecoder() throws -> any Decoder { try next() }
}
