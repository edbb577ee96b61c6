import AtriumProtocol
import AtriumValues
import Foundation

extension ManifestChecker {
    /// `services`: each entry checked on its own, so that every wrong one is reported.
    func readServices(_ value: JSONValue?, hasFunctions: Bool) -> [Manifest.Service]? {
        guard let value else { return [] }
        guard case .array(let list) = value else {
            record(fail("services", "must be an array"))
            return nil
        }
        var services: [Manifest.Service] = []
        var names: Set<String> = []
        var allRead = true
        for (index, item) in list.enumerated() {
            let field = "services[\(index)]"
            guard case .object(let entry) = item else {
                record(fail(field, "must be an object"))
                allRead = false
                continue
            }
            warnUnknownKeys(entry, at: field, known: Self.serviceKeys)
            // Its name and its access are checked apart: a wrong name does not hide a wrong access.
            let name = section { () throws(ManifestError) -> String in
                guard let nameValue = entry["name"] else { throw fail("\(field).name", "is missing") }
                guard case .string(let serviceName) = nameValue else { throw fail("\(field).name", "must be a string") }
                if let problem = Manifest.identifierProblem(serviceName) { throw fail("\(field).name", problem) }
                // Against every name given, so that a name is "declared twice" even when its
                // first service was wrong in some other way.
                if names.contains(serviceName) {
                    throw fail("\(field).name", "\"\(serviceName)\" is declared twice in this package")
                }
                names.insert(serviceName)
                return serviceName
            }
            let access = section { () throws(ManifestError) -> Manifest.Access in
                var remote: Bool?
                if let flag = entry["supportsRemoteSystems"] {
                    guard case .bool(let value) = flag else {
                        throw fail("\(field).supportsRemoteSystems", "must be true or false, not \(flag)")
                    }
                    remote = value
                }
                var access: Manifest.Access = remote == true ? .paired : .local
                if let value = entry["access"] {
                    access = try readAccess(value, field: "\(field).access")
                    if remote == false && access != .local {
                        throw fail(
                            "\(field).access",
                            "is \"\(access)\", but supportsRemoteSystems is false: leave one of them out")
                    }
                }
                return access
            }
            let interface = readInterface(entry, field: field, hasFunctions: hasFunctions)
            if let name, let access, let interface {
                services.append(Manifest.Service(name: name, access: access, interface: interface))
            } else {
                allRead = false
            }
        }
        return allRead ? services : nil
    }

    /// A service's `"access"`: "local", "paired", "any", or {"devices": [identities]}.
    func readAccess(_ value: JSONValue, field: String) throws(ManifestError) -> Manifest.Access {
        switch value {
        case .string("local"): return .local
        case .string("paired"): return .paired
        case .string("any"): return .any
        case .object(let object):
            guard object.count == 1, case .array(let list)? = object["devices"] else {
                throw fail(field, "must be \"local\", \"paired\", \"any\" or {\"devices\": [identities]}")
            }
            var devices: [String] = []
            for (index, item) in list.enumerated() {
                guard case .string(let identity) = item, identity.count >= 8, identity.count <= 64,
                    identity.allSatisfy({ "0123456789abcdef".contains($0) })
                else {
                    throw fail(
                        "\(field).devices[\(index)]",
                        "must be a device's identity, or at least its first 8 digits, in lowercase hex (atrium devices lists them)"
                    )
                }
                devices.append(identity)
            }
            guard !devices.isEmpty else { throw fail("\(field).devices", "names no device; use \"local\" for none") }
            return .devices(devices)
        default:
            throw fail(field, "must be \"local\", \"paired\", \"any\" or {\"devices\": [identities]}")
        }
    }

    /// How many commands a service, and how many fields a command, may declare; how long a
    /// name and a description may be. An interface travels whole in an `apps` answer.
    static let maxCommands = 256
    static let maxFields = 256
    static let maxNameLength = 128
    static let maxDescriptionLength = 500

    /// A service's `commands` (and `commandKey`): each command checked on its own, up to its
    /// first mistake. `.some(nil)` when it declares none; nil when something is wrong. In a
    /// package of declared functions, the functions declare the commands: a service does not.
    func readInterface(_ entry: [String: JSONValue], field: String, hasFunctions: Bool) -> ServiceInterface?? {
        let commandKey = section { () throws(ManifestError) -> String in
            guard let value = entry["commandKey"] else { return ServiceInterface.defaultCommandKey }
            if entry["commands"] == nil {
                throw fail("\(field).commandKey", "names the key of a command: it needs \"commands\"")
            }
            return try name(value, field: "\(field).commandKey", what: "the key a request names its command by")
        }
        guard let value = entry["commands"] else { return commandKey == nil ? nil : .some(nil) }
        if hasFunctions {
            record(
                fail(
                    "\(field).commands",
                    "a package of declared functions takes the commands its functions declare: leave commands out"))
            return nil
        }
        guard case .array(let list) = value, !list.isEmpty, list.count <= Self.maxCommands else {
            record(
                fail(
                    "\(field).commands",
                    "must be an array of 1 to \(Self.maxCommands) commands, like [{\"command\": \"put\", \"fields\": [{\"name\": \"Key\", \"type\": \"string\"}]}]"
                ))
            return nil
        }
        var names: Set<String> = []
        let commands = readEach(list) { (index, item) throws(ManifestError) -> ServiceInterface.Command in
            try readCommand(item, field: "\(field).commands[\(index)]", commandKey: commandKey, names: &names)
        }
        guard let commands, let commandKey else { return nil }
        return ServiceInterface(commandKey: commandKey, commands: commands)
    }

    func readCommand(_ item: JSONValue, field: String, commandKey: String?, names: inout Set<String>)
        throws(ManifestError) -> ServiceInterface.Command
    {
        guard case .object(let entry) = item else {
            throw fail(field, "must be an object like {\"command\": \"put\", \"fields\": [...]}")
        }
        warnUnknownKeys(entry, at: field, known: Self.commandKeys)
        guard let commandValue = entry["command"] else { throw fail("\(field).command", "is missing") }
        let command = try name(commandValue, field: "\(field).command", what: "the value that selects the command")
        guard names.insert(command).inserted else {
            throw fail("\(field).command", "\"\(command)\" is declared twice")
        }
        let description = try entry["description"].map { (value) throws(ManifestError) in
            try describing(value, field: "\(field).description")
        }
        var additionalFields = false
        if let flag = entry["additionalFields"] {
            guard case .bool(let value) = flag else {
                throw fail("\(field).additionalFields", "must be true or false, not \(flag)")
            }
            additionalFields = value
        }
        var fields: [ServiceInterface.Field] = []
        if let value = entry["fields"] {
            guard case .array(let list) = value, list.count <= Self.maxFields else {
                throw fail("\(field).fields", "must be an array of at most \(Self.maxFields) fields")
            }
            var fieldNames: Set<String> = []
            for (index, item) in list.enumerated() {
                let at = "\(field).fields[\(index)]"
                guard case .object(let spec) = item else {
                    throw fail(at, "must be an object like {\"name\": \"Key\", \"type\": \"string\"}")
                }
                warnUnknownKeys(spec, at: at, known: Self.fieldKeys)
                guard let nameValue = spec["name"] else { throw fail("\(at).name", "is missing") }
                let fieldName = try name(nameValue, field: "\(at).name", what: "the message's key")
                if fieldName == commandKey {
                    throw fail("\(at).name", "\"\(fieldName)\" is the command's own key, not a field")
                }
                guard fieldNames.insert(fieldName).inserted else {
                    throw fail("\(at).name", "\"\(fieldName)\" is declared twice")
                }
                fields.append(try readField(spec, name: fieldName, field: at))
            }
        }
        return ServiceInterface.Command(
            name: command, description: description, fields: fields, additionalFields: additionalFields)
    }

    func readField(_ spec: [String: JSONValue], name: String, field: String) throws(ManifestError)
        -> ServiceInterface.Field
    {
        let types = ServiceInterface.FieldType.names.joined(separator: ", ")
        guard let typeValue = spec["type"] else { throw fail("\(field).type", "is missing; the types are \(types)") }
        guard case .string(let typeName) = typeValue, ServiceInterface.FieldType.names.contains(typeName) else {
            var suggestion = ""
            if case .string(let given) = typeValue {
                suggestion = Suggestion.didYouMean(given, among: ServiceInterface.FieldType.names)
            }
            throw fail("\(field).type", "must be one of \(types), not \(typeValue)\(suggestion)")
        }
        var element: String?
        if let of = spec["of"] {
            let kinds = Value.Kind.allCases.filter { $0 != .array }.map(\.rawValue)
            guard typeName == Value.Kind.array.rawValue else {
                throw fail("\(field).of", "is the kind of an array's elements: it needs \"type\": \"array\"")
            }
            guard case .string(let kind) = of, kinds.contains(kind) else {
                throw fail("\(field).of", "must be one of \(kinds.joined(separator: ", ")), not \(of)")
            }
            element = kind
        }
        var optional = false
        if let flag = spec["optional"] {
            guard case .bool(let value) = flag else {
                throw fail("\(field).optional", "must be true or false, not \(flag)")
            }
            optional = value
        }
        let description = try spec["description"].map { (value) throws(ManifestError) in
            try describing(value, field: "\(field).description")
        }
        // Both names were checked above.
        let type = ServiceInterface.FieldType(type: typeName, of: element) ?? .any
        return ServiceInterface.Field(name: name, type: type, optional: optional, description: description)
    }

    /// A command's or a field's name: a key of a message, printable, at most 128 characters.
    func name(_ value: JSONValue, field: String, what: String) throws(ManifestError) -> String {
        guard case .string(let text) = value, !text.isEmpty, text.count <= Self.maxNameLength else {
            throw fail(field, "must be a string of 1 to \(Self.maxNameLength) characters (\(what)), not \(value)")
        }
        if text.unicodeScalars.contains(where: isInvisibleOrControl) {
            throw fail(field, "\"\(untrusted(text, limit: 80))\" holds a control or invisible character")
        }
        return text
    }

    /// A description: printable text of at most 500 characters.
    func describing(_ value: JSONValue, field: String) throws(ManifestError) -> String {
        guard case .string(let text) = value, text.count <= Self.maxDescriptionLength else {
            throw fail(field, "must be a string of at most \(Self.maxDescriptionLength) characters")
        }
        if text.unicodeScalars.contains(where: isInvisibleOrControl) {
            throw fail(field, "holds a control or invisible character (a description is one line of text)")
        }
        return text
    }
}
