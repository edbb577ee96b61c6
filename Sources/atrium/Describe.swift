import ArgumentParser
import AtriumClient
import AtriumProtocol
import AtriumValues
import Foundation

struct Describe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print what a package's services take: their commands and each command's fields.",
        discussion: """
            A service whose manifest declares its commands ("commands", docs/MANIFEST.md) has \
            every request checked against them by the host; a service of declared C functions \
            takes its functions' arguments. atrium send reads the same declaration: it reads \
            each KEY=VALUE as its field's type and checks the message before sending it.

            A client over TCP is told of the services that accept remote callers; describe a \
            local-only service over the host's local socket (unix:PATH). A HOST after the \
            PACKAGE alone is taken as the host when it holds ':' or '/', which no service name \
            does.

            Examples:
              atrium describe atrium.examples.mathlib
              atrium describe atrium.examples.mathlib atrium.math --json-output
              atrium describe my.notes my.notes.service \\
                unix:$XDG_RUNTIME_DIR/atrium/atriumd.sock
            """
    )

    @Argument(help: "The package id.")
    var package: String

    @Argument(help: "The service (default: each service of the package that says what it takes).")
    var service: String?

    @OptionGroup var options: HostOptions

    @Flag(help: "Print the interfaces as JSON.")
    var jsonOutput = false

    /// The service and the host: a second word that can only be a host is the host.
    var target: (service: String?, host: String) {
        if let service, service.contains(where: { ":/".contains($0) }), options.host == HostOptions.defaultHost {
            return (nil, service)
        }
        return (service, options.target)
    }

    func run() async throws {
        let (service, host) = target
        let connection = try await options.connect(to: host)
        let app = try await reachable { try await connection.app(package, timeout: options.duration) }
        await connection.close()
        guard let app else {
            print("no package \(clean(package)) on \(host) (atrium apps \(host) lists them)")
            throw Exit.notSuccess
        }
        var described = app.interfaces.sorted { $0.key < $1.key }
        if let service {
            guard let interface = app.interfaces[service] else {
                print(Self.notDescribed(service, of: app, host: host))
                throw Exit.notSuccess
            }
            described = [(service, interface)]
        }
        if jsonOutput {
            let list = described.map { Self.json(service: $0.key, $0.value) }
            print(MessageText.json(["package": .string(app.package), "services": .array(ValueArray(maps: list))]))
            return
        }
        guard !described.isEmpty else {
            print(
                "\(clean(app.package)): no service says what it takes to this client (none declares commands, or the host is older than descriptions); its services take any message"
            )
            return
        }
        let target = (host == HostOptions.defaultHost ? "" : " \(host)") + (options.insecure ? " --insecure" : "")
        print(
            described.map { Self.text(service: $0.key, $0.value, package: app.package, host: target) }
                .joined(separator: "\n\n"))
    }

    /// Why `service` has no interface in `app`'s answer.
    static func notDescribed(_ service: String, of app: AppInfo, host: String) -> String {
        let name = clean(service)
        // Over the local socket every service the package has is described.
        if host.hasPrefix("unix:") {
            return
                "\(clean(app.package)) has no service \(name) that declares its commands (atrium describe \(clean(app.package)) \(host) lists those that do)"
        }
        if app.services.contains(service) {
            return
                "\(name) says nothing of what it takes to this client: it declares no commands, or this client may not open it"
        }
        return
            "\(clean(app.package)) has no service \(name) that the host describes to this client: a local-only service is described over the host's local socket (atrium describe \(clean(app.package)) \(name) unix:PATH); atrium apps \(host) lists the remote ones"
    }

    /// One service's interface for people.
    static func text(service: String, _ interface: ServiceInterface, package: String, host: String) -> String {
        let count = interface.commands.count
        var lines = [
            "\(clean(service)) (\(clean(package))): \(count) command\(count == 1 ? "" : "s"), chosen by the key \(clean(interface.commandKey))",
            "",
        ]
        for command in interface.commands {
            lines.append("  \(clean(command.name))" + (command.description.map { ": \(clean($0))" } ?? ""))
            let width = command.fields.map(\.name.count).max() ?? 0
            for field in command.fields {
                var line = "      " + clean(field.name).padding(toLength: width, withPad: " ", startingAt: 0)
                line += "  \(field.type)\(field.optional ? ", optional" : "")"
                if let description = field.description { line += "  \(clean(description))" }
                lines.append(line)
            }
            if command.fields.isEmpty { lines.append("      (no fields)") }
            if command.additionalFields { lines.append("      (and any other fields)") }
            lines.append("")
        }
        if let first = interface.commands.first {
            let fields = first.fields.filter { !$0.optional }.map { "\(clean($0.name))=..." }
            lines.append(
                "send one: atrium send\(clean(host)) --package \(clean(package)) --service \(clean(service)) "
                    + ([clean("\(interface.commandKey)=\(first.name)")] + fields).joined(separator: " "))
        }
        return lines.joined(separator: "\n")
    }

    static func json(service: String, _ interface: ServiceInterface) -> ValueSet {
        let commands: [ValueSet] = interface.commands.map { command in
            var entry: ValueSet = ["command": .string(command.name)]
            if let description = command.description { entry["description"] = .string(description) }
            entry["fields"] = .array(
                ValueArray(
                    maps: command.fields.map { field in
                        var spec: ValueSet = [
                            "name": .string(field.name), "type": .string(field.type.typeName),
                        ]
                        if let of = field.type.elementName { spec["of"] = .string(of) }
                        spec["optional"] = .bool(field.optional)
                        if let description = field.description { spec["description"] = .string(description) }
                        return spec
                    }))
            entry["additionalFields"] = .bool(command.additionalFields)
            return entry
        }
        return [
            "service": .string(service), "commandKey": .string(interface.commandKey),
            "commands": .array(ValueArray(maps: commands)),
        ]
    }
}
