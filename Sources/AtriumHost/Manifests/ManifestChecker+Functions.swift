import AtriumProtocol
import AtriumValues
import Foundation

extension ManifestChecker {
    /// `functions` (docs/FFI.md): each function checked on its own (up to its first mistake).
    func readFunctions(_ value: JSONValue?, hasLibrary: Bool?) -> [DeclaredFunction]? {
        guard let value else { return [] }
        if hasLibrary == false {
            record(fail("functions", "need a library to find the functions in"))
            return nil
        }
        guard case .array(let list) = value, !list.isEmpty else {
            record(fail("functions", "must be a non-empty array"))
            return nil
        }
        var commands: Set<String> = []
        return readEach(list) { (index, item) throws(ManifestError) -> DeclaredFunction in
            try readFunction(item, field: "functions[\(index)]", commands: &commands)
        }
    }

    /// One function; `commands` are the commands given so far (by functions read or not).
    func readFunction(_ item: JSONValue, field: String, commands: inout Set<String>) throws(ManifestError)
        -> DeclaredFunction
    {
        let types = DeclaredFunction.CType.allCases.map(\.rawValue).joined(separator: " ")
        guard case .object(let entry) = item else { throw fail(field, "must be an object") }
        warnUnknownKeys(entry, at: field, known: Self.functionKeys)
        guard case .string(let command)? = entry["command"], !command.isEmpty else {
            throw fail("\(field).command", "must be a non-empty string: the Command value that calls the function")
        }
        guard commands.insert(command).inserted else {
            throw fail("\(field).command", "\"\(untrusted(command, limit: 80))\" is declared twice")
        }
        guard case .string(let symbol)? = entry["symbol"], !symbol.isEmpty else {
            throw fail("\(field).symbol", "must be the C function's name")
        }
        var parameters: [DeclaredFunction.Parameter] = []
        var typeOf: [String: DeclaredFunction.CType] = [:]
        if let params = entry["params"] {
            guard case .array(let list) = params else { throw fail("\(field).params", "must be an array") }
            for (position, param) in list.enumerated() {
                let where_ = "\(field).params[\(position)]"
                guard case .object(let spec) = param, case .string(let name)? = spec["name"], !name.isEmpty else {
                    throw fail(where_, "must be an object with a name and a type")
                }
                warnUnknownKeys(spec, at: where_, known: Self.parameterKeys)
                guard case .string(let typeName)? = spec["type"], let type = DeclaredFunction.CType(rawValue: typeName),
                    type != .void
                else {
                    throw fail("\(where_).type", "must be one of: \(types.replacingOccurrences(of: " void", with: ""))")
                }
                guard typeOf.updateValue(type, forKey: name) == nil else {
                    throw fail("\(where_).name", "\"\(untrusted(name, limit: 80))\" is declared twice")
                }
                var lengthOf: String?
                if let target = spec["lengthOf"] {
                    guard case .string(let targetName) = target else {
                        throw fail("\(where_).lengthOf", "must name a bytes parameter")
                    }
                    guard type.isInteger else {
                        throw fail("\(where_).lengthOf", "needs an integer type, not \(type.rawValue)")
                    }
                    lengthOf = targetName
                }
                parameters.append(.init(name: name, type: type, lengthOf: lengthOf))
            }
        }
        for parameter in parameters {
            guard let target = parameter.lengthOf else { continue }
            guard typeOf[target] == .bytes else {
                throw fail(
                    "\(field).params",
                    "\"\(untrusted(parameter.name, limit: 80))\" is the lengthOf \"\(untrusted(target, limit: 80))\", which is not a bytes parameter of this function"
                )
            }
        }
        var returns = DeclaredFunction.CType.void
        var ownership: DeclaredFunction.StringOwnership?
        switch entry["returns"] {
        case nil:
            break
        case .string(let name)?:
            guard let type = DeclaredFunction.CType(rawValue: name), type != .bytes else {
                throw fail(
                    "\(field).returns",
                    "must be one of: \(types.replacingOccurrences(of: " bytes", with: "")) (bytes cannot be returned: their length is unknown)"
                )
            }
            returns = type
            if type == .string { ownership = .library }
        case .object(let spec)?:
            warnUnknownKeys(spec, at: "\(field).returns", known: ["type", "free"])
            guard case .string("string")? = spec["type"], case .string(let free)? = spec["free"], !free.isEmpty
            else {
                throw fail("\(field).returns", "an object must be {\"type\": \"string\", \"free\": \"FUNCTION\"}")
            }
            returns = .string
            ownership = .free(free)
        default:
            throw fail("\(field).returns", "must be a type name or {\"type\": \"string\", \"free\": \"FUNCTION\"}")
        }
        return DeclaredFunction(
            command: command, symbol: symbol, parameters: parameters, returns: returns, ownership: ownership)
    }
}
