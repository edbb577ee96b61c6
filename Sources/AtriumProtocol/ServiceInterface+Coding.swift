@_spi(CBOR) import AtriumValues
import NIOCore

// A service's interface in an `apps` answer (docs/PROTOCOL.md): under an app's optional
// `interfaces` key, an array of maps `{service, commandKey, commands: [{command, description?,
// additionalFields?, fields: [{name, type, of?, optional?, description?}]}]}`.

extension CBOROutput {
    mutating func writeKey(_ key: StaticString, _ flag: Bool) {
        writeText(key)
        writeHead(major: 7, argument: flag ? 21 : 20)
    }

    /// The `interfaces` of an app, as given (the host sorts them by service name).
    mutating func writeInterfaces(_ interfaces: [(service: String, interface: ServiceInterface)]) {
        writeText("interfaces" as StaticString)
        writeHead(major: 4, argument: UInt64(interfaces.count))
        for (service, interface) in interfaces {
            writeHead(major: 5, argument: 3)
            writeKey("service", service)
            writeKey("commandKey", interface.commandKey)
            writeText("commands" as StaticString)
            writeHead(major: 4, argument: UInt64(interface.commands.count))
            for command in interface.commands {
                writeHead(
                    major: 5,
                    argument: UInt64(2 + count(command.description != nil, command.additionalFields)))
                writeKey("command", command.name)
                if let description = command.description { writeKey("description", description) }
                if command.additionalFields { writeKey("additionalFields", true) }
                writeText("fields" as StaticString)
                writeHead(major: 4, argument: UInt64(command.fields.count))
                for field in command.fields {
                    let of = field.type.elementName
                    writeHead(
                        major: 5,
                        argument: UInt64(2 + count(of != nil, field.optional, field.description != nil)))
                    writeKey("name", field.name)
                    writeKey("type", field.type.typeName)
                    if let of { writeKey("of", of) }
                    if field.optional { writeKey("optional", true) }
                    if let description = field.description { writeKey("description", description) }
                }
            }
        }
    }
}

/// The `interfaces` of an app in an `apps` answer, encoded once: a host gives the same
/// package's description to every client that asks, and it may be large (a package of many
/// commands), so it is not built anew for each answer.
public struct EncodedInterfaces: Sendable, Hashable {
    /// The `interfaces` key and its array, as they go in the app's map.
    let bytes: [UInt8]

    /// `interfaces`, in the order given (a host sorts them by service name).
    public init(_ interfaces: [(service: String, interface: ServiceInterface)]) {
        var bytes: [UInt8] = []
        bytes.writeInterfaces(interfaces)
        self.bytes = bytes
    }

    /// How many bytes they take in the answer.
    public var count: Int { bytes.count }
}

extension FrameFields {
    func optionalBool(_ key: StaticString) throws(FrameError) -> Bool? {
        guard let (head, _) = head(key) else { return nil }
        // The simple values themselves (0xf4, 0xf5), not a float whose bits read 20 or 21.
        guard head.major == 7, head.info == 20 || head.info == 21 else {
            throw mistyped(key, "true or false", head)
        }
        return head.info == 21
    }

    /// The `interfaces` of an app in `apps`, by service; empty when the host sent none.
    /// Arrays past ``ProtocolLimits/maxFrameArrayItems`` are refused (a host declares at most
    /// 256 commands of 256 fields).
    func interfaces() throws(FrameError) -> [String: ServiceInterface] {
        guard range("interfaces") != nil else { return [:] }
        func bounded(_ list: [FrameFields], _ key: String) throws(FrameError) -> [FrameFields] {
            guard list.count <= ProtocolLimits.maxFrameArrayItems else {
                throw FrameError(.malformedFrame, "\(name): \(key) has \(list.count) items")
            }
            return list
        }
        var interfaces: [String: ServiceInterface] = [:]
        for entry in try bounded(arrayOfMaps("interfaces"), "interfaces") {
            var commands: [ServiceInterface.Command] = []
            for command in try bounded(entry.arrayOfMaps("commands"), "commands") {
                var fields: [ServiceInterface.Field] = []
                for field in try bounded(command.arrayOfMaps("fields"), "fields") {
                    // A type this client does not know (from a later host) is taken as any: the
                    // host checks it anyway.
                    let type =
                        ServiceInterface.FieldType(type: try field.text("type"), of: try field.optionalText("of"))
                        ?? .any
                    fields.append(
                        ServiceInterface.Field(
                            name: try field.text("name"), type: type,
                            optional: try field.optionalBool("optional") ?? false,
                            description: try field.optionalText("description")))
                }
                commands.append(
                    ServiceInterface.Command(
                        name: try command.text("command"), description: try command.optionalText("description"),
                        fields: fields, additionalFields: try command.optionalBool("additionalFields") ?? false))
            }
            interfaces[try entry.text("service")] = ServiceInterface(
                commandKey: try entry.text("commandKey"), commands: commands)
        }
        return interfaces
    }
}
