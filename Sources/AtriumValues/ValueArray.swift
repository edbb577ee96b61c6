#if canImport(FoundationEssentials)
    public import FoundationEssentials
#else
    public import Foundation
#endif

/// An array inside a ``ValueSet``: every element has one scalar kind, or every element is a
/// map. Arrays of arrays do not exist (as in Windows' `ValueSet`).
///
/// The element kind is fixed by construction, so a `ValueArray` can never be mixed. An empty
/// array has no element kind: it equals every other empty array, and each typed accessor
/// (``strings``, ``ints``, ...) returns `[]` for it.
///
/// `ValueArray` is a `RandomAccessCollection` of ``Value``, for code that wants to walk any
/// array; the typed accessors avoid the per-element wrapping.
public struct ValueArray: Sendable {
    /// The elements, by kind. An empty array is always `.empty`, whatever it was built from.
    public enum Storage: Sendable {
        case empty
        case strings([String])
        case ints([Int64])
        case doubles([Double])
        case bools([Bool])
        case dates([Timestamp])
        case uuids([UUID])
        case bytes([[UInt8]])
        case maps([ValueSet])
    }

    /// The elements, by kind.
    public let storage: Storage

    /// An empty array.
    public init() { storage = .empty }

    public init(strings: [String]) { storage = strings.isEmpty ? .empty : .strings(strings) }
    public init(ints: [Int64]) { storage = ints.isEmpty ? .empty : .ints(ints) }
    public init(doubles: [Double]) { storage = doubles.isEmpty ? .empty : .doubles(doubles) }
    public init(bools: [Bool]) { storage = bools.isEmpty ? .empty : .bools(bools) }
    public init(dates: [Timestamp]) { storage = dates.isEmpty ? .empty : .dates(dates) }
    public init(uuids: [UUID]) { storage = uuids.isEmpty ? .empty : .uuids(uuids) }
    public init(bytes: [[UInt8]]) { storage = bytes.isEmpty ? .empty : .bytes(bytes) }
    public init(maps: [ValueSet]) { storage = maps.isEmpty ? .empty : .maps(maps) }

    /// Builds an array from values that must all be of one kind.
    ///
    /// - Throws: ``ValueSetError`` with code `notAValueSet` and the index of the first element
    ///   that breaks the rule: an element that is itself an array, or one whose kind differs
    ///   from the first element's.
    public init(_ values: [Value]) throws(ValueSetError) {
        guard let first = values.first else {
            storage = .empty
            return
        }
        for (index, value) in values.enumerated() {
            if value.kind == .array {
                throw ValueSetError(.notAValueSet, "an array may not hold arrays", at: [.index(index)])
            }
            if value.kind != first.kind {
                throw ValueSetError(
                    .notAValueSet,
                    "array mixes \(first.kind) and \(value.kind)",
                    at: [.index(index)]
                )
            }
        }
        switch first.kind {
        case .string: storage = .strings(values.map { $0.string! })
        case .int: storage = .ints(values.map { $0.int! })
        case .double: storage = .doubles(values.map { $0.double! })
        case .bool: storage = .bools(values.map { $0.bool! })
        case .date: storage = .dates(values.map { $0.timestamp! })
        case .uuid: storage = .uuids(values.map { $0.uuid! })
        case .bytes: storage = .bytes(values.map { $0.bytes! })
        case .map: storage = .maps(values.map { $0.map! })
        case .array: preconditionFailure("unreachable: arrays were rejected above")
        }
    }

    /// The kind of every element, or `nil` for an empty array.
    public var elementKind: Value.Kind? {
        switch storage {
        case .empty: nil
        case .strings: .string
        case .ints: .int
        case .doubles: .double
        case .bools: .bool
        case .dates: .date
        case .uuids: .uuid
        case .bytes: .bytes
        case .maps: .map
        }
    }

    /// The elements when they are strings (or the array is empty); otherwise `nil`.
    public var strings: [String]? {
        switch storage {
        case .empty: []
        case .strings(let v): v
        default: nil
        }
    }

    /// The elements when they are ints (or the array is empty); otherwise `nil`.
    public var ints: [Int64]? {
        switch storage {
        case .empty: []
        case .ints(let v): v
        default: nil
        }
    }

    /// The elements when they are doubles (or the array is empty); otherwise `nil`.
    public var doubles: [Double]? {
        switch storage {
        case .empty: []
        case .doubles(let v): v
        default: nil
        }
    }

    /// The elements when they are bools (or the array is empty); otherwise `nil`.
    public var bools: [Bool]? {
        switch storage {
        case .empty: []
        case .bools(let v): v
        default: nil
        }
    }

    /// The elements when they are dates (or the array is empty); otherwise `nil`.
    public var dates: [Timestamp]? {
        switch storage {
        case .empty: []
        case .dates(let v): v
        default: nil
        }
    }

    /// The elements when they are UUIDs (or the array is empty); otherwise `nil`.
    public var uuids: [UUID]? {
        switch storage {
        case .empty: []
        case .uuids(let v): v
        default: nil
        }
    }

    /// The elements when they are byte strings (or the array is empty); otherwise `nil`.
    public var byteStrings: [[UInt8]]? {
        switch storage {
        case .empty: []
        case .bytes(let v): v
        default: nil
        }
    }

    /// The elements when they are maps (or the array is empty); otherwise `nil`.
    public var maps: [ValueSet]? {
        switch storage {
        case .empty: []
        case .maps(let v): v
        default: nil
        }
    }
}

extension ValueArray: RandomAccessCollection {
    public var startIndex: Int { 0 }

    public var endIndex: Int {
        switch storage {
        case .empty: 0
        case .strings(let v): v.count
        case .ints(let v): v.count
        case .doubles(let v): v.count
        case .bools(let v): v.count
        case .dates(let v): v.count
        case .uuids(let v): v.count
        case .bytes(let v): v.count
        case .maps(let v): v.count
        }
    }

    /// The element at `position`, wrapped as a ``Value``. Traps when out of bounds, like `Array`.
    public subscript(position: Int) -> Value {
        switch storage {
        case .empty: preconditionFailure("index \(position) out of range of an empty ValueArray")
        case .strings(let v): .string(v[position])
        case .ints(let v): .int(v[position])
        case .doubles(let v): .double(v[position])
        case .bools(let v): .bool(v[position])
        case .dates(let v): .date(v[position])
        case .uuids(let v): .uuid(v[position])
        case .bytes(let v): .bytes(v[position])
        case .maps(let v): .map(v[position])
        }
    }
}

extension ValueArray: Hashable {
    public static func == (lhs: ValueArray, rhs: ValueArray) -> Bool {
        switch (lhs.storage, rhs.storage) {
        case (.empty, .empty): true
        case (.strings(let a), .strings(let b)): a == b
        case (.ints(let a), .ints(let b)): a == b
        case (.doubles(let a), .doubles(let b)): a.elementsEqual(b, by: sameDouble)
        case (.bools(let a), .bools(let b)): a == b
        case (.dates(let a), .dates(let b)): a == b
        case (.uuids(let a), .uuids(let b)): a == b
        case (.bytes(let a), .bytes(let b)): a == b
        case (.maps(let a), .maps(let b)): a == b
        default: false
        }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(elementKind)
        hasher.combine(count)
        for element in self {
            hasher.combine(element)
        }
    }
}

extension ValueArray: ExpressibleByArrayLiteral {
    /// See ``Value/init(arrayLiteral:)``: a mixed literal is a programming error.
    public init(arrayLiteral elements: Value...) {
        self.init(literal: elements)
    }

    init(literal elements: [Value]) {
        do {
            self = try ValueArray(elements)
        } catch {
            preconditionFailure("invalid array literal: \(error)")
        }
    }
}
