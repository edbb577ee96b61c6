public import AtriumProtocol
public import AtriumValues
import Foundation

extension MessageText {
    /// `KEY=VALUE` words as a message for a service that declares its commands: a field's
    /// value is read as the type the command declares for it (`Name=3` is the string "3" for a
    /// string field, `Ratio=2` the double 2.0 for a double; dates in ISO 8601, UUIDs as text,
    /// bytes in base64, arrays and maps as JSON), and words the declaration does not cover are
    /// read as ``valueSet(arguments:)`` reads them. The command is the value of the
    /// interface's command key.
    public static func valueSet(arguments: [String], interface: ServiceInterface) throws -> ValueSet {
        var commandName: String?
        for argument in arguments {
            let (key, text, _) = try split(argument)
            if key == interface.commandKey { commandName = text }
        }
        let command = commandName.flatMap(interface.command(named:))
        var set = ValueSet()
        for argument in arguments {
            let (key, text, forcedString) = try split(argument)
            if key == interface.commandKey || forcedString {
                set[key] = .string(text)
            } else if let field = command?.field(named: key), field.type != .any {
                set[key] = try typed(text, as: field.type, field: key)
            } else {
                set[key] = guessed(text)
            }
        }
        return set
    }

    /// `message` with each declared field's value made the kind its command declares where
    /// it says the same thing another way: an int for a double, ints for doubles, ISO 8601
    /// text or seconds since 1970 for a date, text for a UUID, base64 text for bytes (what JSON
    /// cannot write).
    /// Values that cannot be made so are left for ``ServiceInterface/problems(in:limit:)``.
    public static func completed(_ message: ValueSet, for interface: ServiceInterface) -> ValueSet {
        guard let name = message[interface.commandKey]?.string, let command = interface.command(named: name) else {
            return message
        }
        var result = message
        for field in command.fields {
            if let value = message[field.name], let made = converted(value, to: field.type) {
                result[field.name] = made
            }
        }
        return result
    }

    /// `Key=Value` split, with whether it was `Key:=Value` (a string whatever it reads as).
    static func split(_ argument: String) throws -> (key: String, text: String, forcedString: Bool) {
        if let range = argument.range(of: ":="), !argument[..<range.lowerBound].isEmpty {
            return (String(argument[..<range.lowerBound]), String(argument[range.upperBound...]), true)
        }
        guard let equals = argument.firstIndex(of: "="), equals != argument.startIndex else {
            throw Problem(description: "'\(argument)' is not KEY=VALUE (for example Type=ping or Count=3)")
        }
        return (String(argument[..<equals]), String(argument[argument.index(after: equals)...]), false)
    }

    /// `3` an int, `0.5` a double, `true` a bool, anything else a string.
    static func guessed(_ text: String) -> Value {
        if let int = Int64(text) { return .int(int) }
        if let double = Double(text), text.contains(where: { ".eE".contains($0) }) { return .double(double) }
        if text == "true" || text == "false" { return .bool(text == "true") }
        return .string(text)
    }

    /// `text` as a value of `type`, or a problem that says what the field takes.
    static func typed(_ text: String, as type: ServiceInterface.FieldType, field: String) throws -> Value {
        func wrong(_ how: String) -> Problem {
            Problem(
                description: "\(field) takes \(ServiceInterface.article(type))\(how); '\(text)' is not one")
        }
        switch type {
        case .any:
            return guessed(text)
        case .kind(.string):
            return .string(text)
        case .kind(.int):
            guard let int = Int64(text) else { throw wrong("") }
            return .int(int)
        case .kind(.double):
            guard let double = Double(text) else { throw wrong("") }
            return .double(double)
        case .kind(.bool):
            guard text == "true" || text == "false" else { throw wrong(" (true or false)") }
            return .bool(text == "true")
        case .kind(.date), .kind(.uuid), .kind(.bytes):
            let how = [
                Value.Kind.date: " (ISO 8601, like 2026-11-22T10:00:00Z, or seconds since 1970)",
                .uuid: " (like E621E1F8-C36C-495A-93FC-0C247A3E6E5F)", .bytes: " (in base64)",
            ]
            if case .kind(.date) = type, let seconds = Double(text) {
                return .date(Timestamp(secondsSince1970: seconds))
            }
            guard let value = converted(.string(text), to: type) else {
                throw wrong(type.kind.flatMap { how[$0] } ?? "")
            }
            return value
        case .kind(.array), .kind(.map), .array:
            var parser = JSONParser(Array(text.utf8))
            parser.numbersAsDoubles = type == .array(of: .double)
            let json: Value
            do {
                json = try parser.document()
            } catch {
                let example = type == .kind(.map) ? "{\"Key\": 1}" : "[\"a\", \"b\"]"
                throw Problem(
                    description:
                        "\(field) takes \(ServiceInterface.article(type)) as JSON, like \(field)='\(example)': \(error)"
                )
            }
            return converted(json, to: type) ?? json
        }
    }

    /// `value` as `type` where it is the same thing written another way, or nil.
    static func converted(_ value: Value, to type: ServiceInterface.FieldType) -> Value? {
        switch (value, type) {
        case (.int(let int), .kind(.double)):
            return Double(exactly: int).map(Value.double)
        case (.int, .kind(.date)), (.double, .kind(.date)):
            // Seconds since 1970, as a date is on the wire.
            return value.number.map { .date(Timestamp(secondsSince1970: $0)) }
        case (.string(let text), .kind(.date)):
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            if let date = formatter.date(from: text) { return .date(Timestamp(date)) }
            formatter.formatOptions = [.withInternetDateTime]
            return formatter.date(from: text).map { .date(Timestamp($0)) }
        case (.string(let text), .kind(.uuid)):
            return UUID(uuidString: text).map(Value.uuid)
        case (.string(let text), .kind(.bytes)):
            return Data(base64Encoded: text).map { .bytes([UInt8]($0)) }
        case (.array(let array), .array(let element)):
            // Each element made the declared kind; an array none of whose elements change is
            // left as it is.
            guard array.elementKind != element, !array.isEmpty else { return nil }
            var made: [Value] = []
            for item in array {
                guard let one = converted(item, to: .kind(element)) else { return nil }
                made.append(one)
            }
            return try? .array(ValueArray(made))
        default:
            return nil
        }
    }
}

extension ServiceInterface.FieldType {
    /// The kind of value, for a single-kind type.
    var kind: Value.Kind? {
        if case .kind(let kind) = self { return kind }
        return nil
    }
}
