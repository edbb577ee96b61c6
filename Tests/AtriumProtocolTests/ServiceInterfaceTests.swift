import AtriumProtocol
import AtriumValues
import Foundation
import Testing

/// A service's declared commands, checked against messages: every mismatch named, and a
/// hostile message bounded.
struct ServiceInterfaceTests {
    static let notes = ServiceInterface(commands: [
        .init(
            name: "put",
            fields: [
                .init(name: "Key", type: .kind(.string)),
                .init(name: "Count", type: .kind(.int), optional: true),
                .init(name: "Tags", type: .array(of: .string), optional: true),
                .init(name: "Items", type: .kind(.array), optional: true),
                .init(name: "Extra", type: .any, optional: true),
            ]),
        .init(name: "list"),
        .init(name: "open", fields: [.init(name: "Key", type: .kind(.string))], additionalFields: true),
    ])

    static func problems(_ message: ValueSet) -> [String] { notes.problems(in: message, limit: 50).problems }

    @Test func aMatchingMessageHasNoProblems() {
        #expect(Self.problems(["Command": "put", "Key": "a"]).isEmpty)
        #expect(
            Self.problems([
                "Command": "put", "Key": "a", "Count": 3, "Tags": .array(ValueArray(strings: ["x"])),
                "Items": .array(ValueArray(ints: [1])), "Extra": .bytes([1]),
            ]).isEmpty)
        #expect(Self.problems(["Command": "put", "Key": "a", "Tags": .array(ValueArray())]).isEmpty, "empty array")
        #expect(Self.problems(["Command": "list"]).isEmpty)
        #expect(Self.problems(["Command": "open", "Key": "a", "Anything": 1]).isEmpty, "additionalFields")
        #expect(Self.notes.refusal(of: ["Command": "list"]) == nil)
    }

    @Test func theCommandIsNamedOrTheMessageIsRefused() {
        #expect(Self.problems(["Key": "a"]) == ["the message has no Command: it names the command (put, list, open)"])
        #expect(
            Self.problems(["Command": 3])
                == ["Command must be a string naming the command (put, list, open), not int 3"])
        #expect(
            Self.problems(["Command": "lsit", "Key": 1])
                == ["unknown Command \"lsit\"; this service has: put, list, open; did you mean \"list\"?"])
        let typed = ServiceInterface(commandKey: "Type", commands: [.init(name: "ping")])
        #expect(typed.problems(in: ["Type": "ping"]).problems.isEmpty)
        #expect(
            typed.problems(in: ["Command": "ping"]).problems == ["the message has no Type: it names the command (ping)"]
        )
    }

    @Test func everyFieldProblemIsNamed() {
        let found = Self.problems([
            "Command": "put", "Count": "3", "Tags": .array(ValueArray(ints: [1])), "Items": "x", "Kye": "a",
        ])
        #expect(
            found == [
                "missing field \"Key\" (string)",
                "field \"Count\" must be an int, not string \"3\"",
                "field \"Tags\" must be an array of string, not an array of int",
                "field \"Items\" must be an array, not string \"x\"",
                "\"Kye\" is not a field of put (its fields: Key, Count, Tags, Items, Extra); did you mean \"Key\"?",
            ])
        #expect(
            Self.problems(["Command": "list", "Key": "a"]) == ["\"Key\" is not a field of list (it takes none)"])
    }

    @Test func peerTextIsEscapedAndCut() {
        let found = Self.problems(["Command": "put", "Key": "a", "bad\u{1b}[31mkey\n": 1])
        #expect(found.count == 1)
        #expect(found[0].hasPrefix("\"bad\\u{1B}[31mkey\\u{A}\" is not a field"), "\(found)")
        let long = Self.problems(["Command": "put", "Key": .int(1)])
        #expect(long == ["field \"Key\" must be a string, not int 1"])
        let huge = Self.problems([
            "Command": "put", "Key": .string(String(repeating: "x", count: 100_000)),
            "Count": .string(String(repeating: "y", count: 100_000)),
        ])
        #expect(huge.count == 1 && huge[0].count < 120, "\(huge)")
    }

    @Test func aFloodOfKeysIsCountedNotWrittenOut() {
        var message: ValueSet = ["Command": "put", "Key": "a"]
        for index in 0..<20_000 { message["k\(index)"] = .int(Int64(index)) }
        let (problems, more) = Self.notes.problems(in: message, limit: 5)
        #expect(problems.count == 5)
        #expect(more == 19_995)
        let refusal = Self.notes.refusal(of: message)
        #expect(refusal?.hasSuffix("; and 19995 more") == true)
    }

    @Test func aRefusalStaysShortHoweverMuchTheServiceDeclares() {
        // As large as a manifest may make it: 256 commands, one of 256 fields of 128 characters.
        let long = { (index: Int) in String(repeating: "f", count: 120) + String(index) }
        let interface = ServiceInterface(
            commands: [.init(name: "big", fields: (0..<256).map { .init(name: long($0), type: .kind(.int)) })]
                + (0..<255).map { .init(name: long($0)) })
        var message: ValueSet = ["Command": "big"]
        for index in 0..<256 { message[long(index)] = 1 }
        for index in 0..<10 { message["extra\(index)"] = 1 }
        let refusal = interface.refusal(of: message) ?? ""
        #expect(refusal.hasPrefix("\"extra0\" is not a field of big (its fields: fff"), "\(refusal.prefix(200))")
        #expect(refusal.contains(", and 253 more)"), "the field list is cut")
        #expect(refusal.hasSuffix("\"extra4\" is not a field of big; and 5 more"), "\(refusal.suffix(200))")
        #expect(refusal.utf8.count < 1_000, "\(refusal.utf8.count) bytes")
        let unknown = interface.refusal(of: ["Command": "nope"]) ?? ""
        #expect(unknown.contains(", and 252 more") && unknown.utf8.count < 600, "\(unknown.utf8.count) bytes")
    }

    @Test func commandsAreComparedScalarForScalarAsACPluginDoes() {
        let interface = ServiceInterface(commands: [.init(name: "Kill")])
        #expect(interface.problems(in: ["Command": "Kill"]).problems.isEmpty)
        // U+212A KELVIN SIGN is canonically equivalent to "K", but strcmp sees another command.
        #expect(interface.problems(in: ["Command": "\u{212A}ill"]).problems.first?.hasPrefix("unknown Command") == true)
    }

    @Test func theOutlineTheHostChecksHasTheMessagesKeysAndKinds() throws {
        let messages: [ValueSet] = [
            ["Command": "put", "Key": "a", "Tags": .array(ValueArray(strings: ["x", "y"]))],
            ["Command": "put", "Key": 1, "Tags": .array(ValueArray(ints: [1, 2, 3])), "Items": .array(ValueArray())],
            [
                "Command": "put", "Key": "k", "Items": .array(ValueArray(maps: [["A": ["B": 1]], ["A": 2]])),
                "Extra": ["Deep": ["Deeper": .array(ValueArray(doubles: [1.5]))]], "Kye": .bytes([1, 2]),
            ],
            ["Command": .uuid(UUID()), "When": .date(Timestamp(secondsSince1970: 1))],
        ]
        for message in messages {
            let encoded = EncodedValueSet(message)
            let outline = try encoded.outline()
            #expect(outline.keys == message.keys)
            #expect(outline.map(\.value.kind) == message.map(\.value.kind))
            #expect(
                outline.map { $0.value.array?.elementKind } == message.map { $0.value.array?.elementKind })
            #expect(Self.notes.problems(in: outline, limit: 50) == Self.notes.problems(in: message, limit: 50))
        }
        // An indefinite-length array's first element gives its kind as well.
        let indefinite: [UInt8] = [0xa1, 0x64, 0x54, 0x61, 0x67, 0x73, 0x9f, 0x61, 0x61, 0xff]
        let outline = try indefinite.withUnsafeBytes { raw in try ValueSet(outline: raw) }
        #expect(outline["Tags"]?.array?.elementKind == .string)
    }

    @Test func typesReadAsTheManifestWritesThem() {
        #expect(ServiceInterface.FieldType(type: "string", of: nil) == .kind(.string))
        #expect(ServiceInterface.FieldType(type: "any", of: nil) == .any)
        #expect(ServiceInterface.FieldType(type: "array", of: "map") == .array(of: .map))
        #expect(ServiceInterface.FieldType(type: "array", of: "array") == nil, "no arrays of arrays")
        #expect(ServiceInterface.FieldType(type: "int", of: "int") == nil)
        #expect(ServiceInterface.FieldType(type: "number", of: nil) == nil)
        #expect(ServiceInterface.FieldType.array(of: .int).description == "array of int")
    }
}
