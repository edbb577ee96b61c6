public import AtriumValues
import Foundation

/// A small, seeded, reproducible random number generator (SplitMix64).
public struct SplitMix64: RandomNumberGenerator, Sendable {
    public var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Generates random ValueSets, biased towards the edges: extreme integers, special doubles,
/// empty and non-ASCII strings, dates before 1970 and with fractions, empty containers.
public struct ValueGenerator: Sendable {
    var rng: SplitMix64
    let maxDepth: Int

    public init(seed: UInt64, maxDepth: Int = 5) {
        rng = SplitMix64(seed: seed)
        self.maxDepth = maxDepth
    }

    mutating func pick<T>(_ choices: [T]) -> T { choices[Int.random(in: 0..<choices.count, using: &rng)] }

    mutating func string() -> String {
        let pieces = [
            "", "a", "Type", "ping", "ü", "水", "𐅑", "\"\\", " ", "é\u{301}", "\u{0}",
            "long-" + String(repeating: "x", count: 40),
        ]
        let count = Int.random(in: 0...3, using: &rng)
        return (0..<count).map { _ in pick(pieces) }.joined()
    }

    mutating func int() -> Int64 {
        switch Int.random(in: 0..<4, using: &rng) {
        case 0:
            return pick([
                0, 1, -1, 23, 24, -24, -25, 255, 256, 65535, 65536, Int64(UInt32.max), Int64(UInt32.max) + 1, .max,
                .min,
            ])
        case 1: return Int64.random(in: -1000...1000, using: &rng)
        default: return Int64(bitPattern: rng.next()) >> Int64.random(in: 0...63, using: &rng)
        }
    }

    mutating func double() -> Double {
        switch Int.random(in: 0..<3, using: &rng) {
        case 0:
            return pick([
                0.0, -0.0, .nan, .infinity, -.infinity, 1.5, 65504, 5.960464477539063e-08, .greatestFiniteMagnitude,
                .leastNonzeroMagnitude, 0.1, 1e300,
            ])
        case 1: return Double(Float(bitPattern: UInt32(truncatingIfNeeded: rng.next())))
        default: return Double(bitPattern: rng.next())
        }
    }

    mutating func date() -> Timestamp {
        let seconds = pick([
            0, -1, -86400.5, 1_363_896_240, 1_363_896_240.5, -2_208_988_800, 4_102_444_800.25, Double(Int32.max),
        ])
        return Timestamp(secondsSince1970: seconds + Double(Int.random(in: -5...5, using: &rng)) / 4)
    }

    mutating func bytes() -> [UInt8] {
        (0..<Int.random(in: 0...20, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    mutating func scalar(_ kind: Value.Kind) -> Value {
        switch kind {
        case .string: .string(string())
        case .int: .int(int())
        case .double: .double(double())
        case .bool: .bool(Bool.random(using: &rng))
        case .date: .date(date())
        case .uuid: .uuid(UUID(uuid: withUnsafeBytes(of: (rng.next(), rng.next())) { $0.load(as: uuid_t.self) }))
        case .bytes: .bytes(bytes())
        case .array, .map: preconditionFailure("not a scalar")
        }
    }

    public mutating func value(depth: Int) -> Value {
        let kinds: [Value.Kind] =
            depth >= maxDepth ? [.string, .int, .double, .bool, .date, .uuid, .bytes] : Value.Kind.allCases
        let kind = pick(kinds)
        switch kind {
        case .map:
            return .map(valueSet(depth: depth + 1))
        case .array:
            let count = Int.random(in: 0...4, using: &rng)
            if depth + 1 < maxDepth && Bool.random(using: &rng) {
                return .array(ValueArray(maps: (0..<count).map { _ in valueSet(depth: depth + 2) }))
            }
            let elementKind = pick([Value.Kind.string, .int, .double, .bool, .date, .uuid, .bytes])
            return .array(try! ValueArray((0..<count).map { _ in scalar(elementKind) }))
        default:
            return scalar(kind)
        }
    }

    /// A ValueSet whose maps and arrays stay within `maxDepth` levels (`depth` is its own).
    public mutating func valueSet(depth: Int = 1) -> ValueSet {
        var set = ValueSet()
        for _ in 0..<Int.random(in: 0...6, using: &rng) {
            set[string() + String(Int.random(in: 0...99, using: &rng))] = value(depth: depth)
        }
        return set
    }
}
