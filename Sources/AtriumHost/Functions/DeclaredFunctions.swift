public import AtriumValues
import CAtriumFFI
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A library's declared functions, prepared once at load (symbols found, `ffi_prep_cif`
/// done), and called for requests: arguments are checked against the declared types before
/// anything is called, then marshalled, the function called through libffi, and its result
/// turned into a response.
///
/// Thread rules: ``call(_:)`` may run on any thread; the host serialises calls per package
/// unless the manifest says `"concurrent": true`.
public final class DeclaredFunctions: @unchecked Sendable {
    struct Prepared {
        var function: DeclaredFunction
        var pointer: UnsafeMutableRawPointer
        var cif: UnsafeMutablePointer<ffi_cif>
        var free: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
    }

    let functions: [String: Prepared]
    /// The commands, in manifest order, for error messages.
    let commands: [String]

    /// Why a request was refused before any call: the reason names the parameter.
    public struct Refusal: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// Finds every symbol in `handle` and prepares every signature.
    ///
    /// - Throws: ``PluginLoadError`` naming the function whose symbol or free function is
    ///   missing, or whose signature libffi refuses.
    public init(_ declared: [DeclaredFunction], handle: UnsafeMutableRawPointer) throws(PluginLoadError) {
        var prepared: [String: Prepared] = [:]
        for function in declared {
            guard let pointer = dlsym(handle, function.symbol) else {
                throw PluginLoadError(
                    reason: "function \"\(function.command)\": the library has no symbol \(function.symbol)")
            }
            var free: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
            if case .free(let name) = function.ownership {
                let symbol =
                    name == "free" ? dlsym(UnsafeMutableRawPointer(bitPattern: 0), "free") : dlsym(handle, name)
                guard let symbol else {
                    throw PluginLoadError(
                        reason:
                            "function \"\(function.command)\": the library has no symbol \(name) to free results with")
                }
                free = unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutableRawPointer?) -> Void).self)
            }
            let codes = function.parameters.map { Int32(Self.code($0.type)) }
            guard
                let cif = codes.withUnsafeBufferPointer({
                    atrium_ffi_cif_new(Int32(Self.code(function.returns)), $0.baseAddress, UInt32($0.count))
                })
            else {
                throw PluginLoadError(reason: "function \"\(function.command)\": libffi refused its signature")
            }
            prepared[function.command] = Prepared(function: function, pointer: pointer, cif: cif, free: free)
        }
        functions = prepared
        commands = declared.map(\.command)
    }

    deinit {
        for (_, function) in functions { atrium_ffi_cif_free(function.cif) }
    }

    static func code(_ type: DeclaredFunction.CType) -> Int {
        switch type {
        case .void: Int(ATRIUM_FFI_VOID.rawValue)
        case .int8: Int(ATRIUM_FFI_SINT8.rawValue)
        case .int16: Int(ATRIUM_FFI_SINT16.rawValue)
        case .int32: Int(ATRIUM_FFI_SINT32.rawValue)
        case .int64: Int(ATRIUM_FFI_SINT64.rawValue)
        case .uint8: Int(ATRIUM_FFI_UINT8.rawValue)
        case .uint16: Int(ATRIUM_FFI_UINT16.rawValue)
        case .uint32: Int(ATRIUM_FFI_UINT32.rawValue)
        case .uint64: Int(ATRIUM_FFI_UINT64.rawValue)
        case .float: Int(ATRIUM_FFI_FLOAT.rawValue)
        case .double: Int(ATRIUM_FFI_DOUBLE.rawValue)
        case .bool: Int(ATRIUM_FFI_UINT8.rawValue)
        case .string, .bytes: Int(ATRIUM_FFI_POINTER.rawValue)
        }
    }

    /// Calls the function the message's `Command` names.
    ///
    /// - Returns: the answer: `{Result: value}`, or `{}` for a void function or a NULL string.
    /// - Throws: ``Refusal`` when the command is unknown or an argument is missing, of the
    ///   wrong kind or out of range (nothing is called then), or when a `uint64` result does
    ///   not fit a ValueSet int.
    public func call(_ message: ValueSet) throws(Refusal) -> ValueSet {
        guard case .string(let command)? = message["Command"] else {
            throw Refusal(
                description: "the message needs a Command string, one of: \(commands.joined(separator: ", "))")
        }
        guard let prepared = functions[command] else {
            throw Refusal(
                description: "unknown Command \"\(command)\"; this service has: \(commands.joined(separator: ", "))")
        }
        let parameters = prepared.function.parameters
        // Every argument is checked and converted before anything is called.
        var values: [Argument] = []
        values.reserveCapacity(parameters.count)
        for parameter in parameters {
            values.append(try argument(parameter, in: parameters, message: message))
        }
        defer {
            for value in values { value.release() }
        }
        let outcome = withUnsafeTemporaryAllocation(of: UInt64.self, capacity: max(parameters.count, 1)) { slots in
            withUnsafeTemporaryAllocation(of: UnsafeMutableRawPointer?.self, capacity: max(parameters.count, 1)) {
                pointers in
                for (index, value) in values.enumerated() {
                    let slot = UnsafeMutableRawPointer(slots.baseAddress! + index)
                    value.store(at: slot)
                    pointers[index] = slot
                }
                var result: (UInt64, UInt64) = (0, 0)
                withUnsafeMutableBytes(of: &result) { resultBytes in
                    atrium_ffi_call(
                        prepared.cif,
                        unsafeBitCast(prepared.pointer, to: (@convention(c) () -> Void).self),
                        resultBytes.baseAddress,
                        pointers.baseAddress
                    )
                }
                return withUnsafeBytes(of: &result) { answer(prepared, $0) }
            }
        }
        return try outcome.get()
    }

    /// One converted argument: a scalar's bits, or a pointer to memory released after the call.
    enum Argument {
        case bits(UInt64, size: Int)
        case float(Float)
        case double(Double)
        case pointer(UnsafeMutableRawPointer)

        func store(at slot: UnsafeMutableRawPointer) {
            switch self {
            case .bits(let bits, let size):
                switch size {
                case 1: slot.storeBytes(of: UInt8(truncatingIfNeeded: bits), as: UInt8.self)
                case 2: slot.storeBytes(of: UInt16(truncatingIfNeeded: bits), as: UInt16.self)
                case 4: slot.storeBytes(of: UInt32(truncatingIfNeeded: bits), as: UInt32.self)
                default: slot.storeBytes(of: bits, as: UInt64.self)
                }
            case .float(let value): slot.storeBytes(of: value, as: Float.self)
            case .double(let value): slot.storeBytes(of: value, as: Double.self)
            case .pointer(let pointer): slot.storeBytes(of: pointer, as: UnsafeMutableRawPointer.self)
            }
        }

        func release() {
            if case .pointer(let pointer) = self { pointer.deallocate() }
        }
    }

    static func size(_ type: DeclaredFunction.CType) -> Int {
        switch type {
        case .int8, .uint8, .bool: 1
        case .int16, .uint16: 2
        case .int32, .uint32, .float: 4
        default: 8
        }
    }

    func argument(_ parameter: DeclaredFunction.Parameter, in all: [DeclaredFunction.Parameter], message: ValueSet)
        throws(Refusal)
        -> Argument
    {
        let name = parameter.name
        let type = parameter.type
        if let target = parameter.lengthOf {
            let count = message[target]?.bytes?.count ?? 0
            guard let range = type.integerRange, range.contains(Int128(count)) else {
                throw Refusal(
                    description:
                        "argument \"\(target)\" is \(count) bytes, more than \(name) (\(type.rawValue)) can count")
            }
            return .bits(UInt64(count), size: Self.size(type))
        }
        guard let value = message[name] else {
            throw Refusal(description: "missing argument \"\(name)\" (\(type.rawValue))")
        }
        func wrongKind() -> Refusal {
            Refusal(description: "argument \"\(name)\" must be \(Self.kindWanted(type)), not \(value.kind) \(value)")
        }
        switch type {
        case .int8, .int16, .int32, .int64, .uint8, .uint16, .uint32, .uint64:
            guard case .int(let int) = value else { throw wrongKind() }
            guard let range = type.integerRange, range.contains(Int128(int)) else {
                throw Refusal(
                    description:
                        "argument \"\(name)\": \(int) does not fit \(type.rawValue) (\(type.integerRange!.lowerBound)...\(type.integerRange!.upperBound))"
                )
            }
            return .bits(UInt64(bitPattern: int), size: Self.size(type))
        case .float, .double:
            let number: Double
            switch value {
            case .double(let double): number = double
            case .int(let int):
                guard let exact = Double(exactly: int), type == .double || Float(exactly: int) != nil else {
                    throw Refusal(description: "argument \"\(name)\": \(int) has no exact \(type.rawValue) value")
                }
                number = exact
            default: throw wrongKind()
            }
            return type == .float ? .float(Float(number)) : .double(number)
        case .bool:
            guard case .bool(let bool) = value else { throw wrongKind() }
            return .bits(bool ? 1 : 0, size: 1)
        case .string:
            guard case .string(let text) = value else { throw wrongKind() }
            guard !text.utf8.contains(0) else {
                throw Refusal(description: "argument \"\(name)\" holds a NUL character, which a C string cannot carry")
            }
            let utf8 = Array(text.utf8)
            let memory = UnsafeMutableRawPointer.allocate(byteCount: utf8.count + 1, alignment: 1)
            utf8.withUnsafeBytes { if let base = $0.baseAddress { memory.copyMemory(from: base, byteCount: $0.count) } }
            memory.storeBytes(of: 0, toByteOffset: utf8.count, as: UInt8.self)
            return .pointer(memory)
        case .bytes:
            guard case .bytes(let bytes) = value else { throw wrongKind() }
            let memory = UnsafeMutableRawPointer.allocate(byteCount: max(bytes.count, 1), alignment: 8)
            bytes.withUnsafeBytes {
                if let base = $0.baseAddress { memory.copyMemory(from: base, byteCount: $0.count) }
            }
            return .pointer(memory)
        case .void:
            throw Refusal(description: "argument \"\(name)\" is declared void")
        }
    }

    static func kindWanted(_ type: DeclaredFunction.CType) -> String {
        switch type {
        case .float, .double: "a double (or an int with an exact value)"
        case .bool: "a bool"
        case .string: "a string"
        case .bytes: "bytes"
        default: "an int"
        }
    }

    /// The answer for the raw result bytes of a call.
    func answer(_ prepared: Prepared, _ result: UnsafeRawBufferPointer) -> Result<ValueSet, Refusal> {
        func int<T: FixedWidthInteger>(_: T.Type) -> Value { .int(Int64(truncatingIfNeeded: result.load(as: T.self))) }
        let value: Value?
        switch prepared.function.returns {
        case .void: value = nil
        // libffi widens small integer results to a full register (ffi_arg).
        case .int8: value = .int(Int64(Int8(truncatingIfNeeded: result.load(as: Int64.self))))
        case .int16: value = .int(Int64(Int16(truncatingIfNeeded: result.load(as: Int64.self))))
        case .int32: value = .int(Int64(Int32(truncatingIfNeeded: result.load(as: Int64.self))))
        case .int64: value = int(Int64.self)
        case .uint8: value = .int(Int64(UInt8(truncatingIfNeeded: result.load(as: UInt64.self))))
        case .uint16: value = .int(Int64(UInt16(truncatingIfNeeded: result.load(as: UInt64.self))))
        case .uint32: value = .int(Int64(UInt32(truncatingIfNeeded: result.load(as: UInt64.self))))
        case .uint64:
            let raw = result.load(as: UInt64.self)
            guard let fits = Int64(exactly: raw) else {
                return .failure(Refusal(description: "the result \(raw) does not fit a ValueSet int (Int64)"))
            }
            value = .int(fits)
        case .float: value = .double(Double(result.load(as: Float.self)))
        case .double: value = .double(result.load(as: Double.self))
        case .bool: value = .bool(UInt8(truncatingIfNeeded: result.load(as: UInt64.self)) != 0)
        case .string:
            let pointer = result.load(as: UnsafeMutableRawPointer?.self)
            value = pointer.map { .string(String(cString: $0.assumingMemoryBound(to: CChar.self))) }
            if let pointer, let free = prepared.free { free(pointer) }
        case .bytes: value = nil
        }
        guard let value else { return .success([:]) }
        return .success(["Result": value])
    }
}
