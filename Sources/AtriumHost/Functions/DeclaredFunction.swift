import AtriumProtocol
import AtriumValues

/// A C function that a manifest declares (`functions`), to be called by the host through
/// libffi when a request's `Command` names it. See docs/FFI.md.
public struct DeclaredFunction: Sendable, Hashable {
    /// The C types a declared function may take and return.
    public enum CType: String, Sendable, Hashable, CaseIterable {
        case int8, int16, int32, int64, uint8, uint16, uint32, uint64, float, double, bool, string, bytes, void

        var isInteger: Bool {
            switch self {
            case .int8, .int16, .int32, .int64, .uint8, .uint16, .uint32, .uint64: true
            default: false
            }
        }

        /// The range of an integer type, as Int128 bounds usable for checks.
        var integerRange: ClosedRange<Int128>? {
            switch self {
            case .int8: Int128(Int8.min)...Int128(Int8.max)
            case .int16: Int128(Int16.min)...Int128(Int16.max)
            case .int32: Int128(Int32.min)...Int128(Int32.max)
            case .int64: Int128(Int64.min)...Int128(Int64.max)
            case .uint8: 0...Int128(UInt8.max)
            case .uint16: 0...Int128(UInt16.max)
            case .uint32: 0...Int128(UInt32.max)
            case .uint64: 0...Int128(UInt64.max)
            default: nil
            }
        }
    }

    /// One parameter. A parameter with ``lengthOf`` is not read from the message: it receives
    /// the byte count of the named `bytes` parameter.
    public struct Parameter: Sendable, Hashable {
        public var name: String
        public var type: CType
        public var lengthOf: String?
    }

    /// Who owns a returned string.
    public enum StringOwnership: Sendable, Hashable {
        /// The library keeps it; the host only copies it.
        case library
        /// The host calls this function of the library (`free`: the C library's) on it after copying.
        case free(String)
    }

    public var command: String
    public var symbol: String
    public var parameters: [Parameter]
    public var returns: CType
    /// For a `string` result: who frees it.
    public var ownership: StringOwnership?
}

extension DeclaredFunction {
    /// The function as a command a client can read: its arguments, each required, by the kind
    /// of value it takes (the host checks them itself, with the ranges of the C types, and
    /// lets other keys through). A `lengthOf` parameter is not one: the host counts it.
    var describedCommand: ServiceInterface.Command {
        let fields = parameters.filter { $0.lengthOf == nil }.map { parameter in
            let kind: Value.Kind =
                switch parameter.type {
                case .float, .double: .double
                case .bool: .bool
                case .string: .string
                case .bytes: .bytes
                default: .int
                }
            return ServiceInterface.Field(
                name: parameter.name, type: .kind(kind), description: "C \(parameter.type.rawValue)")
        }
        let result = returns == .void ? "nothing" : "Result (\(returns.rawValue))"
        return ServiceInterface.Command(
            name: command, description: "calls \(symbol); answers \(result)", fields: fields, additionalFields: true)
    }
}
