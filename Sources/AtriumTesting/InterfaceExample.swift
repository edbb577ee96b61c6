public import AtriumProtocol

extension ServiceInterface {
    /// A service's declared commands as the tests write them in a manifest: `put` with a
    /// string, a typed array and an `any` field, and `list`, which takes other fields.
    public static func example(commandKey: String = ServiceInterface.defaultCommandKey) -> ServiceInterface {
        ServiceInterface(
            commandKey: commandKey,
            commands: [
                .init(
                    name: "put", description: "Stores a note.",
                    fields: [
                        .init(name: "Key", type: .kind(.string), description: "its name"),
                        .init(name: "Tags", type: .array(of: .string), optional: true),
                        .init(name: "Extra", type: .any, optional: true),
                    ]),
                .init(name: "list", additionalFields: true),
            ])
    }
}
