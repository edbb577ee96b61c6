import ArgumentParser
import AtriumClient
import AtriumProtocol
import AtriumValues
import Foundation

struct Send: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send one message to an app service and print the answer.",
        discussion: """
            The message is a JSON object (--json) or KEY=VALUE words: Count=3 is an int, \
            Ratio=0.5 a double, Ok=true a bool, anything else a string (Name:=3 forces a string).

            When the service declares its commands (atrium describe PACKAGE SERVICE prints \
            them), each field is read as the type its command declares (Name=3 is the string \
            "3" for a string field, Ratio=2 the double 2.0, When=2026-11-22T10:00:00Z a date, \
            Tags='["a","b"]' an array), and a message that does not match is not sent: what is \
            wrong is printed with the command's fields. --unchecked sends it as given (the host \
            checks it all the same). With the shell completions installed (Scripts/install.sh \
            installs them), Tab completes Command=... and then the chosen command's fields.

            Examples:
              atrium send --package atrium.examples.echo --service atrium.echo \\
                Type=hello Count=3
              atrium send 10.0.0.5:7340 --package P --service S \\
                --json '{"Items": [1, 2]}' --json-output
            """
    )

    @OptionGroup var options: HostOptions

    @Option(help: "The package id of the app.")
    var package: String

    @Option(help: "The app service name.")
    var service: String

    @Option(help: ArgumentHelp("The message as a JSON object.", valueName: "json"))
    var json: String?

    @Argument(
        help: ArgumentHelp("The message as KEY=VALUE words (instead of --json).", valueName: "key=value"),
        completion: .custom { words, index, prefix in await Send.completions(words, at: index, prefix: prefix) })
    var fields: [String] = []

    @Flag(help: "Print the status and the answer as JSON.")
    var jsonOutput = false

    @Flag(help: "Send the message as given: do not read the service's declared commands or check against them.")
    var unchecked = false

    func validate() throws {
        _ = try message()
    }

    /// The host, and the KEY=VALUE words: a first word with '=' is a field, not a host.
    var hostAndFields: (String, [String]) {
        options.host.contains("=")
            ? (options.local ? options.target : HostOptions.defaultHost, [options.host] + fields)
            : (options.target, fields)
    }

    /// The message; with the service's `interface`, each field read as its declared type.
    func message(for interface: ServiceInterface? = nil) throws -> ValueSet {
        let fields = hostAndFields.1
        if json != nil && !fields.isEmpty {
            throw ValidationError("give the message either as --json or as KEY=VALUE words, not both")
        }
        do {
            if let json {
                let message = try MessageText.valueSet(json: json)
                return interface.map { MessageText.completed(message, for: $0) } ?? message
            }
            if let interface { return try MessageText.valueSet(arguments: fields, interface: interface) }
            return try MessageText.valueSet(arguments: fields)
        } catch {
            throw ValidationError("\(error)")
        }
    }

    func run() async throws {
        let connection = try await options.connect(to: hostAndFields.0)
        var message = try self.message()
        if !unchecked,
            let interface = try await reachable({ try await connection.app(package, timeout: options.duration) })?
                .interfaces[service]
        {
            do {
                message = try self.message(for: interface)
            } catch {
                // A value that is not its field's type: a usage error, said plainly.
                await connection.close()
                printError("\(error)")
                throw ExitCode.validationFailure
            }
            if let problems = Self.problems(message, interface) {
                await connection.close()
                FileHandle.standardError.write(Data((problems + "\n").utf8))
                throw Exit.notSuccess
            }
        }
        let app = AppServiceConnection(appServiceName: service, packageId: package, connection: connection)
        let opened = try await reachable { try await app.openRemote(timeout: options.duration) }
        guard opened == .success else {
            if jsonOutput {
                var result: ValueSet = ["opened": .int(Int64(opened.rawValue)), "openedName": .string("\(opened)")]
                if let error = app.openError { result["error"] = .string(error) }
                print(MessageText.json(result))
            } else {
                print("open \(package)/\(service): \(opened)\(openHint(opened, app.openError, options.target))")
            }
            await connection.close()
            throw Exit.notSuccess
        }
        let answer = try await reachable { try await app.sendMessage(message, timeout: options.duration) }
        await connection.close()
        if jsonOutput {
            var result: ValueSet = [
                "status": .int(Int64(answer.status.rawValue)), "statusName": .string("\(answer.status)"),
            ]
            if let error = answer.error { result["error"] = .string(error) }
            result["message"] = .map(answer.message)
            print(MessageText.json(result))
        } else {
            print("status: \(answer.status)")
            if let error = answer.error { print("error: \(error)") }
            print(answer.message)
        }
        if answer.status != .success { throw Exit.notSuccess }
    }
}

extension Send {
    /// The shell's completions of a KEY=VALUE word, from what the service declares: the
    /// command key with each command, then the chosen command's fields not given yet. Asks the
    /// host the command line names (2 s at most); none when it cannot, or when the service
    /// declares nothing.
    static func completions(_ words: [String], at current: Int, prefix: String) async -> [String] {
        var package: String?
        var service: String?
        var host: String?
        var insecure = false
        var given: [String] = []
        var index = (words.firstIndex(of: "send") ?? -1) + 1
        func value() -> String? {
            defer { index += 1 }
            return index < words.count && index != current ? words[index] : nil
        }
        while index < words.count {
            let word = words[index]
            let position = index
            index += 1
            if position == current { continue }
            switch word {
            case "--package": package = value()
            case "--service": service = value()
            case "--json", "--timeout": index += 1
            case "--insecure": insecure = true
            default:
                if word.hasPrefix("--package=") {
                    package = String(word.dropFirst("--package=".count))
                } else if word.hasPrefix("--service=") {
                    service = String(word.dropFirst("--service=".count))
                } else if word.hasPrefix("-") {
                    continue
                } else if word.contains("=") {
                    given.append(word)
                } else if host == nil {
                    host = word
                }
            }
        }
        guard let package, let service,
            let options = try? HostOptions.parse(
                [host ?? HostOptions.defaultHost, "--timeout", "2"] + (insecure ? ["--insecure"] : [])),
            let connection = try? await options.connect()
        else { return [] }
        let app = try? await connection.app(package, timeout: .seconds(2))
        await connection.close()
        guard let interface = app?.interfaces[service] else { return [] }
        let key = interface.commandKey
        let keysGiven = Set(given.map { String($0.prefix { $0 != "=" && $0 != ":" }) })
        let chosen = given.last { $0.hasPrefix(key + "=") }.map { String($0.dropFirst(key.count + 1)) }
        var candidates: [String]
        if let chosen, let command = interface.command(named: chosen), !prefix.hasPrefix(key + "=") {
            candidates = command.fields.filter { !keysGiven.contains($0.name) }.map { "\($0.name)=" }
        } else {
            candidates = interface.commands.map { "\(key)=\($0.name)" }
        }
        candidates = candidates.filter { $0.hasPrefix(prefix) }
        return candidates
    }

    /// What is wrong with `message` for `interface`, with the fields its command takes; nil
    /// when nothing is.
    static func problems(_ message: ValueSet, _ interface: ServiceInterface) -> String? {
        let (problems, more) = interface.problems(in: message, limit: 20)
        guard !problems.isEmpty else { return nil }
        var lines = ["not sent: the message does not match what the service declares (--unchecked sends it anyway)"]
        lines += problems.map { "  \(clean($0))" }
        if more > 0 { lines.append("  and \(more) more") }
        if let name = message[interface.commandKey]?.string, let command = interface.command(named: name) {
            let fields = command.fields.map { "\(clean($0.name)) (\($0.type)\($0.optional ? ", optional" : ""))" }
            lines.append(
                "\(clean(name)) takes: " + (fields.isEmpty ? "no fields" : fields.joined(separator: ", ")))
        }
        return lines.joined(separator: "\n")
    }
}
