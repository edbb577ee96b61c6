public import AtriumValues

/// What a service says it takes: its commands, each with its fields (a manifest's
/// `services[].commands`, docs/MANIFEST.md). The host checks every request to such a service
/// against it before the service sees the request; `apps` with a `package` carries it to
/// clients (`atrium describe`), which can check a message before they send it.
public struct ServiceInterface: Sendable, Hashable {
    /// The key whose string value names the command (`"Command"` unless the manifest says).
    public var commandKey: String
    /// The commands, as declared.
    public var commands: [Command]

    /// The key a request names its command by, unless the manifest names another.
    public static let defaultCommandKey = "Command"

    public init(commandKey: String = Self.defaultCommandKey, commands: [Command]) {
        self.commandKey = commandKey
        self.commands = commands
    }

    /// One command: the value of the command key that selects it, and the fields it takes.
    public struct Command: Sendable, Hashable {
        public var name: String
        public var description: String?
        public var fields: [Field]
        /// Whether a request may hold fields the command does not declare (by default it may
        /// not, so that a misspelled optional field is refused, not silently ignored).
        public var additionalFields: Bool

        public init(name: String, description: String? = nil, fields: [Field] = [], additionalFields: Bool = false) {
            self.name = name
            self.description = description
            self.fields = fields
            self.additionalFields = additionalFields
        }

        /// The field named `name`.
        public func field(named name: String) -> Field? { fields.first { $0.name == name } }
    }

    /// One field of a command's request.
    public struct Field: Sendable, Hashable {
        public var name: String
        public var type: FieldType
        public var optional: Bool
        public var description: String?

        public init(name: String, type: FieldType, optional: Bool = false, description: String? = nil) {
            self.name = name
            self.type = type
            self.optional = optional
            self.description = description
        }
    }

    /// The values a field takes: one kind of ``Value``, an array of one kind, or anything.
    public enum FieldType: Sendable, Hashable, CustomStringConvertible {
        /// Any value.
        case any
        /// A value of this kind; `.array` alone is an array of any element kind.
        case kind(Value.Kind)
        /// An array whose elements are of this kind (an empty array passes).
        case array(of: Value.Kind)

        /// The type named `type` (a ``Value/Kind`` or `any`), with `of` the element kind of
        /// an array; nil when the names are not types.
        public init?(type: String, of element: String?) {
            if let element {
                guard type == Value.Kind.array.rawValue, let kind = Value.Kind(rawValue: element),
                    kind != .array
                else { return nil }
                self = .array(of: kind)
            } else if type == "any" {
                self = .any
            } else if let kind = Value.Kind(rawValue: type) {
                self = .kind(kind)
            } else {
                return nil
            }
        }

        /// The names a manifest gives types by.
        public static let names = Value.Kind.allCases.map(\.rawValue) + ["any"]

        /// `type` as the manifest writes it.
        public var typeName: String {
            switch self {
            case .any: "any"
            case .kind(let kind): kind.rawValue
            case .array: Value.Kind.array.rawValue
            }
        }

        /// The element kind of a typed array (`of` in the manifest).
        public var elementName: String? {
            if case .array(let kind) = self { return kind.rawValue }
            return nil
        }

        /// `string`, `array of int`, `any`.
        public var description: String {
            if case .array(let kind) = self { return "array of \(kind)" }
            return typeName
        }

        /// Whether `value` is of this type.
        public func accepts(_ value: Value) -> Bool {
            switch self {
            case .any: true
            case .kind(let kind): value.kind == kind
            case .array(let element):
                if case .array(let array) = value { array.elementKind.map { $0 == element } ?? true } else { false }
            }
        }
    }

    /// The command named `name`.
    /// The bytes this interface takes in an `apps` answer, estimated from above (its texts,
    /// and room for the keys and heads around them).
    public var encodedSizeBound: Int {
        commands.reduce(commandKey.utf8.count + 32) { total, command in
            command.fields.reduce(total + command.name.utf8.count + (command.description?.utf8.count ?? 0) + 48) {
                $0 + $1.name.utf8.count + ($1.description?.utf8.count ?? 0) + 64
            }
        }
    }

    /// The command named `name`, scalar for scalar (as a C plugin's `strcmp` compares: a
    /// name that is only canonically equivalent is another command).
    public func command(named name: String) -> Command? {
        commands.first { $0.name.unicodeScalars.elementsEqual(name.unicodeScalars) }
    }

    /// The names of the commands, for messages: `add, greet` (cut past 400 characters).
    public var commandList: String { Self.listed(commands.map(\.name)) }

    /// `names` joined with commas, at most about 400 characters of them, then how many more:
    /// an answer to a refused request stays small, however many a service declares.
    static func listed(_ names: [String]) -> String {
        var text = ""
        for (index, name) in names.enumerated() {
            if text.count + name.count > 400 { return text + ", and \(names.count - index) more" }
            text += (index > 0 ? ", " : "") + name
        }
        return text
    }

    /// What about `message` does not match this interface, each in a sentence: no command or
    /// an unknown one (then nothing else is checked), a missing field, a field of the wrong
    /// type, a field the command does not declare. At most `limit` are written out; `more`
    /// counts the rest (a hostile message may hold a hundred thousand keys, and each written
    /// problem costs a "did you mean"). Empty when the message matches.
    public func problems(in message: ValueSet, limit: Int = 5) -> (problems: [String], more: Int) {
        // Only what a refusal says is written out: a request that matches costs its lookups.
        var key: String { untrusted(commandKey, limit: 64) }
        guard let named = message[commandKey] else {
            return (["the message has no \(key): it names the command (\(commandList))"], 0)
        }
        guard case .string(let name) = named else {
            return (["\(key) must be a string naming the command (\(commandList)), not \(Self.brief(named))"], 0)
        }
        guard let command = command(named: name) else {
            let problem =
                "unknown \(key) \"\(untrusted(name, limit: 64))\"; this service has: \(commandList)"
                + Suggestion.didYouMean(name, among: commands.map(\.name))
            return ([problem], 0)
        }
        var problems: [String] = []
        var more = 0
        func found(_ problem: @autoclosure () -> String) {
            if problems.count < limit { problems.append(problem()) } else { more += 1 }
        }
        for field in command.fields {
            if let value = message[field.name] {
                if !field.type.accepts(value) {
                    found("field \"\(field.name)\" must be \(Self.article(field.type)), not \(Self.brief(value))")
                }
            } else if !field.optional {
                found("missing field \"\(field.name)\" (\(field.type))")
            }
        }
        if !command.additionalFields {
            // The command's fields and a "did you mean" are said once, with the first key it
            // does not declare: a refusal costs one suggestion, however many keys it holds.
            // A set only for a command of many fields; a few are compared in turn.
            let declared: Set<String>? = command.fields.count > 8 ? Set(command.fields.map(\.name)) : nil
            var first = true
            for (other, _) in message
            where other != commandKey
                && !(declared?.contains(other) ?? command.fields.contains { $0.name == other })
            {
                if first {
                    let names = command.fields.map(\.name)
                    let fields = names.isEmpty ? "it takes none" : "its fields: \(Self.listed(names))"
                    found(
                        "\"\(untrusted(other, limit: 64))\" is not a field of \(command.name) (\(fields))"
                            + Suggestion.didYouMean(other, among: names))
                    first = false
                } else {
                    found("\"\(untrusted(other, limit: 64))\" is not a field of \(command.name)")
                }
            }
        }
        return (problems, more)
    }

    /// The problems of `message` in one line (at most `limit` written out, then a count of the
    /// rest), or nil when it matches.
    public func refusal(of message: ValueSet, limit: Int = 5) -> String? {
        let (problems, more) = problems(in: message, limit: limit)
        guard !problems.isEmpty else { return nil }
        let shown = problems.joined(separator: "; ")
        return more > 0 ? "\(shown); and \(more) more" : shown
    }

    /// `a string`, `an int`, `bytes`, `an array of string`, `any value`.
    public static func article(_ type: FieldType) -> String {
        switch type {
        case .any: "any value"
        case .kind(.bytes): "bytes"
        case .kind(let kind): "\(kind == .int || kind == .array ? "an" : "a") \(kind)"
        case .array(let kind): "an array of \(kind)"
        }
    }

    /// A value, shortly, for an error: its kind and, for a scalar, the value itself (cut).
    static func brief(_ value: Value) -> String {
        switch value {
        case .string(let text): "string \"\(untrusted(text, limit: 32))\""
        case .int(let int): "int \(int)"
        case .double(let double): "double \(double)"
        case .bool(let bool): "bool \(bool)"
        case .array(let array): array.elementKind.map { "an array of \($0)" } ?? "an empty array"
        default: "\(value.kind)"
        }
    }
}
