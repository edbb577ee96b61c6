#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Encodes an `Encodable` value (a struct, a class, a `[String: T]` dictionary) into a
/// ``ValueSet``, so that plugins and clients can send their own types as messages.
///
/// Mapping: integers become `int` (a `UInt64` above `Int64.max` is an error), `Float` and
/// `Double` become `double`, `Date` a `date`, `UUID` a `uuid`, `Data` and `[UInt8]` `bytes`,
/// other arrays an `array` (which must be homogeneous and may not hold arrays), nested
/// types a `map`. `nil` optionals are left out.
///
/// - Throws: `EncodingError.invalidValue`, with the coding path, when a value has no
///   ValueSet form: the top level is not keyed, an array is mixed, an integer is too large.
public struct ValueSetEncoder: Sendable {
    /// Passed to `Encodable.encode(to:)` as `encoder.userInfo`.
    public var userInfo: [CodingUserInfoKey: any Sendable] = [:]

    public init() {}

    public func encode<T: Encodable>(_ value: T) throws -> ValueSet {
        let root = EncodingNode()
        try EncodingNode.encode(value, into: root, codingPath: [], userInfo: userInfo)
        let encoded = try root.resolve(codingPath: [])
        guard case .map(let set)? = encoded else {
            let what = encoded.map { "\($0.kind)" } ?? "nothing"
            throw EncodingError.invalidValue(
                value,
                .init(
                    codingPath: [], debugDescription: "a ValueSet must be encoded from a keyed container, not \(what)")
            )
        }
        return set
    }
}

/// A value under construction: the encoder fills it in, then resolves it into a ``Value``.
final class EncodingNode {
    enum Content {
        case pending
        case absent
        case value(Value)
        case keyed(keys: [String], nodes: [String: EncodingNode])
        case unkeyed([EncodingNode])
    }

    var content: Content = .pending

    /// Encodes `value` into `node`, mapping the types that have a ValueSet kind of their own.
    static func encode<T: Encodable>(
        _ value: T,
        into node: EncodingNode,
        codingPath: [any CodingKey],
        userInfo: [CodingUserInfoKey: any Sendable]
    ) throws {
        if let special = specialValue(value) {
            node.content = .value(special)
            return
        }
        try value.encode(to: NodeEncoder(node: node, codingPath: codingPath, userInfo: userInfo))
    }

    /// Matches on the static type: a dynamic cast would also turn an empty `[Double]` into
    /// `[UInt8]`.
    static func specialValue<T>(_ value: T) -> Value? {
        switch T.self {
        case is Date.Type: .date(Timestamp(value as! Date))
        case is Timestamp.Type: .date(value as! Timestamp)
        case is UUID.Type: .uuid(value as! UUID)
        case is Data.Type: .bytes([UInt8](value as! Data))
        case is [UInt8].Type: .bytes(value as! [UInt8])
        default: nil
        }
    }

    /// The finished value; `nil` for an absent (nil) value.
    func resolve(codingPath: [any CodingKey]) throws -> Value? {
        switch content {
        case .pending:
            return .map(ValueSet())
        case .absent:
            return nil
        case .value(let value):
            return value
        case .keyed(let keys, let nodes):
            var set = ValueSet(minimumCapacity: keys.count)
            for key in keys {
                let path = codingPath + [AnyCodingKey(key)]
                if let value = try nodes[key]!.resolve(codingPath: path) {
                    set.appendNew(key, value)
                }
            }
            return .map(set)
        case .unkeyed(let nodes):
            var values: [Value] = []
            values.reserveCapacity(nodes.count)
            for (position, node) in nodes.enumerated() {
                let path = codingPath + [AnyCodingKey(position)]
                guard let value = try node.resolve(codingPath: path) else {
                    throw EncodingError.invalidValue(
                        Optional<Int>.none as Any,
                        .init(codingPath: path, debugDescription: "an array in a ValueSet cannot hold nil")
                    )
                }
                values.append(value)
            }
            do {
                return .array(try ValueArray(values))
            } catch {
                throw EncodingError.invalidValue(values, .init(codingPath: codingPath, debugDescription: error.reason))
            }
        }
    }

    func makeKeyed(codingPath: [any CodingKey]) {
        if case .keyed = content { return }
        content = .keyed(keys: [], nodes: [:])
    }

    func child(forKey key: String) -> EncodingNode {
        guard case .keyed(var keys, var nodes) = content else { preconditionFailure("not a keyed node") }
        if let existing = nodes[key] { return existing }
        let node = EncodingNode()
        keys.append(key)
        nodes[key] = node
        content = .keyed(keys: keys, nodes: nodes)
        return node
    }

    func appendChild() -> EncodingNode {
        guard case .unkeyed(var nodes) = content else { preconditionFailure("not an unkeyed node") }
        let node = EncodingNode()
        nodes.append(node)
        content = .unkeyed(nodes)
        return node
    }

    var childCount: Int {
        if case .unkeyed(let nodes) = content { return nodes.count }
        return 0
    }
}

/// A coding key made from a string or an array position.
struct AnyCodingKey: CodingKey {
    var stringValue: String
    var intValue: Int?
    init(_ string: String) { stringValue = string }
    init(_ int: Int) {
        stringValue = String(int)
        intValue = int
    }
    init?(stringValue: String) { self.init(stringValue) }
    init?(intValue: Int) { self.init(intValue) }
}

struct NodeEncoder: Encoder {
    let node: EncodingNode
    let codingPath: [any CodingKey]
    let userInfoSendable: [CodingUserInfoKey: any Sendable]
    var userInfo: [CodingUserInfoKey: Any] { userInfoSendable }

    init(node: EncodingNode, codingPath: [any CodingKey], userInfo: [CodingUserInfoKey: any Sendable]) {
        self.node = node
        self.codingPath = codingPath
        self.userInfoSendable = userInfo
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        node.makeKeyed(codingPath: codingPath)
        return KeyedEncodingContainer(KeyedNodeContainer<Key>(encoder: self))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .unkeyed = node.content {} else { node.content = .unkeyed([]) }
        return UnkeyedNodeContainer(encoder: self)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleNodeContainer(encoder: self)
    }

    func nested(_ node: EncodingNode, key: any CodingKey) -> NodeEncoder {
        NodeEncoder(node: node, codingPath: codingPath + [key], userInfo: userInfoSendable)
    }

    func encode<T: Encodable>(_ value: T, into node: EncodingNode, key: any CodingKey) throws {
        try EncodingNode.encode(value, into: node, codingPath: codingPath + [key], userInfo: userInfoSendable)
    }
}

/// The ValueSet value of a primitive, or an error for an integer outside Int64.
func primitiveValue<T: BinaryInteger>(_ value: T, codingPath: [any CodingKey]) throws -> Value {
    guard let int = Int64(exactly: value) else {
        throw EncodingError.invalidValue(
            value,
            .init(
                codingPath: codingPath,
                debugDescription: "integer \(value) is outside the Int64 range of a ValueSet int")
        )
    }
    return .int(int)
}

struct KeyedNodeContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let encoder: NodeEncoder
    var codingPath: [any CodingKey] { encoder.codingPath }

    func set(_ value: Value, _ key: Key) { encoder.node.child(forKey: key.stringValue).content = .value(value) }

    mutating func encodeNil(forKey key: Key) throws { encoder.node.child(forKey: key.stringValue).content = .absent }
    mutating func encode(_ value: Bool, forKey key: Key) throws { set(.bool(value), key) }
    mutating func encode(_ value: String, forKey key: Key) throws { set(.string(value), key) }
    mutating func encode(_ value: Double, forKey key: Key) throws { set(.double(value), key) }
    mutating func encode(_ value: Float, forKey key: Key) throws { set(.double(Double(value)), key) }
    mutating func encode(_ value: Int, forKey key: Key) throws { set(.int(Int64(value)), key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { set(.int(Int64(value)), key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { set(.int(Int64(value)), key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { set(.int(Int64(value)), key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { set(.int(value), key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws {
        set(try primitiveValue(value, codingPath: codingPath + [key]), key)
    }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { set(.int(Int64(value)), key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { set(.int(Int64(value)), key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { set(.int(Int64(value)), key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws {
        set(try primitiveValue(value, codingPath: codingPath + [key]), key)
    }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try encoder.encode(value, into: encoder.node.child(forKey: key.stringValue), key: key)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type,
        forKey key: Key
    ) -> KeyedEncodingContainer<NestedKey> {
        encoder.nested(encoder.node.child(forKey: key.stringValue), key: key).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        encoder.nested(encoder.node.child(forKey: key.stringValue), key: key).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        encoder.nested(encoder.node.child(forKey: "super"), key: AnyCodingKey("super"))
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        encoder.nested(encoder.node.child(forKey: key.stringValue), key: key)
    }
}

struct UnkeyedNodeContainer: UnkeyedEncodingContainer {
    let encoder: NodeEncoder
    var codingPath: [any CodingKey] { encoder.codingPath }
    var count: Int { encoder.node.childCount }

    func append(_ value: Value) { encoder.node.appendChild().content = .value(value) }
    var nextKey: AnyCodingKey { AnyCodingKey(count) }

    mutating func encodeNil() throws { encoder.node.appendChild().content = .absent }
    mutating func encode(_ value: Bool) throws { append(.bool(value)) }
    mutating func encode(_ value: String) throws { append(.string(value)) }
    mutating func encode(_ value: Double) throws { append(.double(value)) }
    mutating func encode(_ value: Float) throws { append(.double(Double(value))) }
    mutating func encode(_ value: Int) throws { append(.int(Int64(value))) }
    mutating func encode(_ value: Int8) throws { append(.int(Int64(value))) }
    mutating func encode(_ value: Int16) throws { append(.int(Int64(value))) }
    mutating func encode(_ value: Int32) throws { append(.int(Int64(value))) }
    mutating func encode(_ value: Int64) throws { append(.int(value)) }
    mutating func encode(_ value: UInt) throws { append(try primitiveValue(value, codingPath: codingPath + [nextKey])) }
    mutating func encode(_ value: UInt8) throws { append(.int(Int64(value))) }
    mutating func encode(_ value: UInt16) throws { append(.int(Int64(value))) }
    mutating func encode(_ value: UInt32) throws { append(.int(Int64(value))) }
    mutating func encode(_ value: UInt64) throws {
        append(try primitiveValue(value, codingPath: codingPath + [nextKey]))
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        let key = nextKey
        try encoder.encode(value, into: encoder.node.appendChild(), key: key)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type)
        -> KeyedEncodingContainer<NestedKey>
    {
        let key = nextKey
        return encoder.nested(encoder.node.appendChild(), key: key).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let key = nextKey
        return encoder.nested(encoder.node.appendChild(), key: key).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        let key = nextKey
        return encoder.nested(encoder.node.appendChild(), key: key)
    }
}

struct SingleNodeContainer: SingleValueEncodingContainer {
    let encoder: NodeEncoder
    var codingPath: [any CodingKey] { encoder.codingPath }

    func set(_ value: Value) { encoder.node.content = .value(value) }

    mutating func encodeNil() throws { encoder.node.content = .absent }
    mutating func encode(_ value: Bool) throws { set(.bool(value)) }
    mutating func encode(_ value: String) throws { set(.string(value)) }
    mutating func encode(_ value: Double) throws { set(.double(value)) }
    mutating func encode(_ value: Float) throws { set(.double(Double(value))) }
    mutating func encode(_ value: Int) throws { set(.int(Int64(value))) }
    mutating func encode(_ value: Int8) throws { set(.int(Int64(value))) }
    mutating func encode(_ value: Int16) throws { set(.int(Int64(value))) }
    mutating func encode(_ value: Int32) throws { set(.int(Int64(value))) }
    mutating func encode(_ value: Int64) throws { set(.int(value)) }
    mutating func encode(_ value: UInt) throws { set(try primitiveValue(value, codingPath: codingPath)) }
    mutating func encode(_ value: UInt8) throws { set(.int(Int64(value))) }
    mutating func encode(_ value: UInt16) throws { set(.int(Int64(value))) }
    mutating func encode(_ value: UInt32) throws { set(.int(Int64(value))) }
    mutating func encode(_ value: UInt64) throws { set(try primitiveValue(value, codingPath: codingPath)) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try EncodingNode.encode(value, into: encoder.node, codingPath: codingPath, userInfo: encoder.userInfoSendable)
    }
}
