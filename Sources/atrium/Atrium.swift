import ArgumentParser
import AtriumBench
import AtriumClient
import AtriumProtocol
import AtriumTLS
import AtriumValues
import Foundation
import NIOSSL
import Synchronization

/// Exit codes scripts can rely on (also in --help).
enum Exit {
    /// The host or the service answered with a status other than success, or pings were lost.
    static let notSuccess = ExitCode(1)
    /// The host could not be reached, went away, or did not answer in time.
    static let unreachable = ExitCode(3)
}

@main
struct Atrium: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "atrium",
        abstract: "Talk to an Atrium host: ping it, list its apps, send messages to its app services.",
        discussion: """
            HOST is host:port (port 7340 when left out), unix:/path for the host's local \
            socket, or the name of a host on the network as atrium discover lists it (quoted \
            when it has spaces); it defaults to 127.0.0.1:7340. Over TCP, atrium speaks TLS with an \
            identity of its own (a key and certificate kept in $XDG_STATE_HOME/atrium, made at \
            first use); --insecure speaks plain TCP, to a loopback host only.

            Exit codes: 0 success; 1 the host or service answered with a status other than \
            success (or pings were lost); 3 the host could not be reached, went away or did \
            not answer in time; 64 the command line was wrong.
            """,
        version: AtriumVersion.current,
        subcommands: [
            Ping.self, Apps.self, Describe.self, Send.self, Launch.self, Discover.self, Bench.self, Pair.self,
            Pairing.self,
            Devices.self, Status.self, New.self,
        ]
    )
}

/// Options every command shares.
struct HostOptions: ParsableArguments {
    @Argument(
        help: ArgumentHelp(
            "The host: host:port, host, unix:/path, or a name atrium discover lists.", valueName: "host"))
    var host: String = Self.defaultHost

    static let defaultHost = "127.0.0.1:7340"

    @Option(
        help: ArgumentHelp(
            "Seconds to wait for each answer (default: 5 more than the host's response timeout, so that the host reports a service that does not answer; 10 to connect).",
            valueName: "seconds"))
    var timeout: Double?

    @Option(
        help: ArgumentHelp(
            "A token the host's operator made (atriumd token create), to use the host without pairing; default: $ATRIUM_TOKEN. Sent only to a loopback host, or to one whose identity is known (paired, or --host-identity).",
            valueName: "token"))
    var token: String?

    @Option(
        help: ArgumentHelp(
            "The identity the host must prove (64 hex digits, as atriumd prints at start), for a host this client has not paired with.",
            valueName: "hex"))
    var hostIdentity: String?

    /// `--token`, or `$ATRIUM_TOKEN`.
    var tokenToSend: String? {
        token ?? ProcessInfo.processInfo.environment["ATRIUM_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
    }

    @Flag(
        help:
            "Talk to the host's local socket where atriumd puts it by default ($XDG_RUNTIME_DIR/atrium/atriumd.sock, or /tmp/atrium-UID/atriumd.sock without XDG_RUNTIME_DIR); the same as HOST unix: alone."
    )
    var local = false

    /// The host to talk to: HOST, or the default local socket with --local.
    var target: String {
        local ? "unix:" + defaultLocalSocketPath() : host == "unix:" ? "unix:" + defaultLocalSocketPath() : host
    }

    @Flag(
        help:
            "Speak plain TCP instead of TLS: only to a loopback host (127.0.0.1, ::1, localhost), which atriumd serves both ways."
    )
    var insecure = false

    func validate() throws {
        if local && host != Self.defaultHost && !host.contains("=") {
            throw ValidationError("--local and HOST ('\(host)') both name the host: give one")
        }
        if let hostIdentity, hostIdentity.count != 64 || !hostIdentity.allSatisfy(\.isHexDigit) {
            throw ValidationError("--host-identity takes the 64 hex digits of an identity, as atriumd prints at start")
        }
        // A first word with '=' is a KEY=VALUE field of `send`, which then uses the default host.
        guard let endpoint = AtriumEndpoint(host) else {
            guard host.contains("=") || Self.isHostName(host) else {
                throw ValidationError(
                    "'\(host)' is not a host: use host:port (like 192.168.1.20:7340), host, unix:/path/to/atriumd.sock, or a name atrium discover lists"
                )
            }
            return
        }
        if let timeout, !(timeout > 0 && timeout <= 604_800) {
            throw ValidationError("--timeout takes seconds above 0, at most a week (604800)")
        }
        if insecure && !endpoint.isLoopback {
            throw ValidationError(
                "--insecure speaks plain TCP, which anyone on the network could read and change: atrium allows it only to a loopback host, not \(endpoint)"
            )
        }
    }

    /// `--timeout`, when given: nil leaves each wait to the connection's default.
    var duration: Duration? { timeout.map { .milliseconds(Int64($0 * 1000)) } }

    /// Whether `text` can be the name of a discovered host: one line, no '/', '=' or ':' (a
    /// HOST with a colon is an address, and a wrong one is a usage error).
    static func isHostName(_ text: String) -> Bool {
        !text.trimmingCharacters(in: .whitespaces).isEmpty
            && !text.contains(where: { "/=:".contains($0) || $0.isNewline })
    }

    func connect(to address: String? = nil, checkingKnownHost: Bool = true) async throws -> AtriumConnection {
        let text = address ?? target
        if !isAddress(text) && Self.isHostName(text) { return try await connectDiscovered(text) }
        guard let endpoint = AtriumEndpoint(text) else {
            throw ValidationError(
                "'\(address ?? host)' is not a host: use host:port, host, or unix:/path/to/atriumd.sock")
        }
        if insecure && !endpoint.isLoopback {
            throw ValidationError(
                "--insecure speaks plain TCP: atrium allows it only to a loopback host, not \(endpoint)")
        }
        var tls: ClientTLS?
        if case .tcp = endpoint.address, !insecure {
            do {
                // A host this client paired with must prove the identity it proved then.
                tls = ClientTLS(
                    identity: try ClientTLS.defaultIdentity(),
                    expectedHostIdentity: try hostIdentity?.lowercased()
                        ?? (checkingKnownHost ? KnownHosts().identity(of: endpoint) : nil))
            } catch {
                printError("cannot load this client's TLS identity or known hosts: \(error)")
                throw Exit.unreachable
            }
        }
        let connection = try await reachable {
            try await AtriumConnection.connect(
                to: endpoint, clientName: "atrium command line", token: tokenToSend, tls: tls, timeout: duration)
        }
        connectedHostIdentity.withLock { $0 = connection.hostIdentity }
        if tls != nil, tls?.expectedHostIdentity == nil, !endpoint.isLoopback, checkingKnownHost {
            printError(
                "\(endpoint) is not a host this client paired with, so nothing proves it is the one you mean (its identity: \(connection.hostIdentity ?? "?")); atrium pair \(endpoint) makes it known"
            )
        }
        return connection
    }
}

extension HostOptions {
    /// Connects to the host advertised as `name` on the network (DNS-SD).
    func connectDiscovered(_ name: String) async throws -> AtriumConnection {
        let (found, problem, ambiguous) = await discoveredHost(
            named: name, within: min(duration ?? .seconds(5), .seconds(5)))
        guard let system = found else {
            if ambiguous, let problem {
                printError(problem)
                throw Exit.unreachable
            }
            printError(
                "no host named \"\(name)\" was found on the network"
                    + (problem.map { " (\($0); is avahi-daemon running?)" } ?? "")
                    + "; atrium discover lists the hosts it finds")
            throw Exit.unreachable
        }
        if insecure && !system.endpoints.allSatisfy(\.isLoopback) {
            throw ValidationError(
                "--insecure speaks plain TCP: atrium allows it only to a loopback host, not \(system.displayName)")
        }
        let tls: ClientTLS?
        do {
            tls = insecure ? nil : ClientTLS(identity: try ClientTLS.defaultIdentity())
        } catch {
            printError("cannot load this client's TLS identity: \(error)")
            throw Exit.unreachable
        }
        var expecting = tls
        if let hostIdentity { expecting?.expectedHostIdentity = hostIdentity.lowercased() }
        let checked = expecting
        let connection = try await reachable {
            try await AtriumConnection.connect(
                to: system, clientName: "atrium command line", token: tokenToSend, tls: checked, timeout: duration)
        }
        connectedHostIdentity.withLock { $0 = connection.hostIdentity }
        if !system.isPaired, KnownHosts().identity(ofHostId: system.id) == nil, tls != nil {
            printError(
                "\"\(system.displayName)\" (\(connection.endpoint)) is not a host this client paired with, so nothing proves it is the one you mean (its identity: \(connection.hostIdentity ?? "?")); atrium pair \"\(system.displayName)\" makes it known"
            )
        }
        return connection
    }
}

/// What follows a refused open's status: the host's reason, and what to do about pairing.
func openHint(_ status: AppServiceConnectionStatus, _ reason: String?, _ host: String) -> String {
    if status == .notAuthorized { noteRefusedByHost() }
    let pairing = " (this device is not paired with the host, or the service does not take it: atrium pair \(host))"
    let reason = reason.map(clean)
    guard status == .notAuthorized else { return reason.map { ": \($0)" } ?? "" }
    // The host's "not paired" names no address; this one does.
    guard let reason, !reason.contains("not paired") else { return pairing }
    return ": \(reason)" + pairing
}

func printError(_ text: String) {
    FileHandle.standardError.write(Data("atrium: \(text)\n".utf8))
}

/// Runs `body`, turning a connection failure into exit code 3 with its message.
/// Runs `body`; a client error is printed and exits with the code scripts rely on: 1 when the
/// host answered no (it refused: not authorized, not paired, a refused command), 3 when it
/// could not be reached, went away or did not answer in time.
func reachable<T>(_ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as AtriumClientError {
        printError(error.message)
        throw exitStatus(for: error)
    }
}

/// The exit code for a client error (``reachable(_:)``); a host that refused this client as
/// not authorized is noted (``noteRefusedByHost()``).
func exitStatus(for error: AtriumClientError) -> ExitCode {
    switch error.code {
    case .notAuthorized, .refused:
        if error.code == .notAuthorized { noteRefusedByHost() }
        return Exit.notSuccess
    case .hostWentAway where error.message.contains("notAuthorized"):
        noteRefusedByHost()
        return Exit.notSuccess
    default: return Exit.unreachable
    }
}

/// The identity of the host this run connected to, if it proved one.
let connectedHostIdentity = Mutex<String?>(nil)

/// The host this run connected to refused it as not authorized: if this client paired with
/// it, that is noted, so that `atrium discover` says what it knows (paired here, refused
/// there) until the next pairing.
func noteRefusedByHost() {
    guard let identity = connectedHostIdentity.withLock({ $0 }) else { return }
    try? KnownHosts().noteRefused(identity)
}

func milliseconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
}

struct Ping: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send Roman pings and print each round trip, the way ping does.",
        discussion: """
            Opens the Roman test app's ping service (package 5085ShawnHenry.RomanTestApp_jsjw7knzsgcce, \
            service com.microsoft.test.cdppingpongservice) and sends {Type: "ping", \
            CreationDate, TargetId}; the answer must be a pong with both values echoed.

            Example:
              atrium ping 192.168.1.20 -c 5 -i 0.2
            """
    )

    static let package = "5085ShawnHenry.RomanTestApp_jsjw7knzsgcce"
    static let service = "com.microsoft.test.cdppingpongservice"

    @OptionGroup var options: HostOptions

    @Option(name: .short, help: ArgumentHelp("How many pings to send.", valueName: "count"))
    var count: Int = 4

    @Option(name: .short, help: ArgumentHelp("Seconds between pings.", valueName: "seconds"))
    var interval: Double = 1

    func validate() throws {
        guard count > 0 else { throw ValidationError("-c takes a count of 1 or more") }
        guard interval >= 0 else { throw ValidationError("-i takes seconds, 0 or more") }
    }

    func run() async throws {
        let connection = try await options.connect()
        let ping = AppServiceConnection(appServiceName: Self.service, packageId: Self.package, connection: connection)
        let status = try await reachable { try await ping.openRemote(timeout: options.duration) }
        guard status == .success else {
            printError("the ping service did not open: \(status)\(openHint(status, ping.openError, options.target))")
            throw Exit.notSuccess
        }
        print("PING \(options.target) (\(connection.welcome.hostName)) with Roman pings")
        var times: [Double] = []
        var ended: AtriumClientError?
        var sentCount = 0
        for sequence in 1...count {
            sentCount += 1
            let sent = Timestamp.now
            let start = ContinuousClock.now
            do {
                let answer = try await ping.sendMessage(
                    ["Type": "ping", "CreationDate": .date(sent), "TargetId": .string("atrium-\(sequence)")],
                    timeout: options.duration
                )
                let elapsed = milliseconds(ContinuousClock.now - start)
                if answer.status == .success, answer.message["Type"] == "pong",
                    answer.message["CreationDate"] == .date(sent)
                {
                    times.append(elapsed)
                    print(String(format: "pong from %@: seq=%d time=%.3f ms", options.target, sequence, elapsed))
                } else {
                    print("seq=\(sequence): unexpected answer \(answer.status) \(answer.message)")
                }
            } catch let error as AtriumClientError where error.code == .timedOut {
                print(
                    "seq=\(sequence): no answer within \(AtriumConnection.describe(options.duration ?? connection.defaultTimeout))"
                )
            } catch let error as AtriumClientError {
                // The connection ended (the host's reason, a revoked pairing say): nothing more
                // can be sent on it.
                printError(error.message)
                ended = error
                break
            }
            fflush(nil)  // each answer at once, also into a pipe or a file
            if sequence < count { try await Task.sleep(for: .milliseconds(Int64(interval * 1000))) }
        }
        await connection.close()
        let lost = sentCount - times.count
        print("--- \(options.target) ping statistics ---")
        print(
            "\(sentCount) sent, \(times.count) received, \(lost) lost (\(lost * 100 / sentCount)%)"
                + (ended != nil && sentCount < count ? "; \(count - sentCount) not sent: the connection ended" : ""))
        if !times.isEmpty {
            let sorted = times.sorted()
            func percentile(_ p: Double) -> Double {
                sorted[min(sorted.count - 1, Int((p * Double(sorted.count)).rounded(.up)) - 1)]
            }
            print(
                String(
                    format: "min/p50/p99/max = %.3f/%.3f/%.3f/%.3f ms", sorted[0], percentile(0.5), percentile(0.99),
                    sorted.last!))
        }
        if let ended { throw exitStatus(for: ended) }
        if lost > 0 { throw Exit.notSuccess }
    }
}

struct Apps: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the host's packages, their state, their remote services and their URI schemes.",
        discussion: """
            Example:
              atrium apps unix:/run/user/1000/atrium/atriumd.sock
            """
    )

    @OptionGroup var options: HostOptions

    @Flag(help: "Print JSON instead of a table.")
    var jsonOutput = false

    func run() async throws {
        let connection = try await options.connect()
        let apps = try await reachable { try await connection.apps(timeout: options.duration) }
        await connection.close()
        if jsonOutput {
            let list: [ValueSet] = apps.map { app in
                var entry: ValueSet = [
                    "package": .string(app.package), "displayName": .string(app.displayName),
                    "services": .array(ValueArray(strings: app.services)),
                    "schemes": .array(ValueArray(strings: app.schemes)),
                ]
                if let state = app.state { entry["state"] = .string(state) }
                if let reason = app.reason { entry["reason"] = .string(reason) }
                return entry
            }
            print(MessageText.json(["apps": .array(ValueArray(maps: list))]))
            return
        }
        let rows =
            [["PACKAGE", "NAME", "STATE", "SERVICES", "SCHEMES"]]
            + apps.map {
                [
                    $0.package, $0.displayName, $0.state ?? "-", $0.services.joined(separator: ", "),
                    $0.schemes.joined(separator: ", "),
                ].map(clean)
            }
        let widths = (0..<4).map { column in rows.map { $0[column].count }.max()! }
        for row in rows {
            print(
                (zip(row, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) } + [row[4]])
                    .joined(separator: "  ").trimmingCharacters(in: .whitespaces))
        }
        // Why a package is not ready (a host tells its local clients).
        let reasons = apps.compactMap { app in
            app.reason.map { clean("\(app.package): \(app.state ?? "not ready"): \($0)") }
        }
        if !reasons.isEmpty {
            print("")
            reasons.forEach { print($0) }
        } else if apps.contains(where: { $0.state != nil && $0.state != "ready" }) {
            print(
                "\n(the host tells why a package is not ready to local clients only: atrium apps unix:PATH, or its log)"
            )
        }
    }
}

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

struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Measure request/response throughput and latency against an app service.",
        discussion: """
            Opens --connections connections, each with a channel to the service, and keeps \
            --pipeline requests in flight on each for --duration seconds, then prints the \
            round trips per second and the latency percentiles (HdrHistogram). The target is \
            the Echo service unless told otherwise; `atrium-baseline` (a raw SwiftNIO echo with \
            the same framing) can be the host too (with --insecure: it speaks plain TCP only), and \
            Benchmarks/compare.py runs both. Over TCP it speaks TLS, as every atrium command \
            does, unless told --insecure.

            With --idle, it opens the connections, says hello, and holds them for --duration \
            seconds without sending anything (to measure an idle connection's memory).

            Examples:
              atrium bench           # 1 connection, one request at a time, for 10 s
              atrium bench 127.0.0.1:7340 --connections 64 --duration 5
              atrium bench --pipeline 64 --json-output
            """
    )

    @OptionGroup var options: HostOptions

    @Option(help: "How many connections.")
    var connections: Int = 1

    @Option(help: "How many requests each connection keeps in flight.")
    var pipeline: Int = 1

    @Option(help: ArgumentHelp("Seconds to run.", valueName: "seconds"))
    var duration: Double = 10

    @Option(help: "The package to open.")
    var package: String = "atrium.examples.echo"

    @Option(help: "The service to open.")
    var service: String = "atrium.echo"

    @Flag(help: "Hold idle connections instead of sending requests.")
    var idle = false

    @Flag(help: "Print the result as JSON.")
    var jsonOutput = false

    func validate() throws {
        guard connections > 0, pipeline > 0 else {
            throw ValidationError("--connections and --pipeline take 1 or more")
        }
        guard duration > 0 else { throw ValidationError("--duration takes seconds above 0") }
        guard AtriumEndpoint(options.host) != nil || HostOptions.isHostName(options.host) else {
            throw ValidationError("'\(options.host)' is not a host")
        }
    }

    /// HOST as an address, or the first endpoint of the host discovered under that name.
    func resolveTarget() async throws -> BenchConfiguration.Target {
        var endpoint = AtriumEndpoint(options.target)
        if !isAddress(options.target) {
            let (found, problem, ambiguous) = await discoveredHost(named: options.target, within: .seconds(5))
            guard let first = found?.endpoints.first else {
                printError(
                    ambiguous
                        ? problem ?? ""
                        : "no host named \"\(options.host)\" was found on the network"
                            + (problem.map { " (\($0))" } ?? "") + "; atrium discover lists the hosts it finds")
                throw Exit.unreachable
            }
            endpoint = first
        }
        switch endpoint?.address {
        case .tcp(let host, let port): return .tcp(host: host, port: port)
        case .unix(let path): return .unix(path: path)
        case nil: throw ValidationError("'\(options.host)' is not a host")
        }
    }

    /// TLS with this client's identity over TCP, unless --insecure.
    func tlsContext(for target: BenchConfiguration.Target) throws -> NIOSSLContext? {
        guard case .tcp = target, !options.insecure else { return nil }
        do {
            return try ClientTLS.defaultIdentity().makeClientContext()
        } catch {
            printError("cannot load this client's TLS identity: \(error)")
            throw Exit.unreachable
        }
    }

    func run() async throws {
        let seconds = Duration.milliseconds(Int64(duration * 1000))
        let target = try await resolveTarget()
        let tls = try tlsContext(for: target)
        if idle {
            do {
                try await LoadGenerator.holdIdle(target, connections: connections, tls: tls) {
                    print("holding \(connections) idle connections to \(options.host) for \(duration) s")
                    try await Task.sleep(for: seconds)
                }
            } catch let error as BenchError {
                printError(error.description)
                throw Exit.unreachable
            }
            return
        }
        let configuration = BenchConfiguration(
            target: target, connections: connections, pipeline: pipeline, duration: seconds, package: package,
            service: service, tls: tls
        )
        let quiet = jsonOutput
        let result: BenchResult
        do {
            result = try await LoadGenerator.run(configuration) { done, elapsed in
                guard !quiet else { return }
                let secs = milliseconds(elapsed) / 1000
                FileHandle.standardError.write(
                    Data(String(format: "\r%5.1f s: %d round trips (%.0f/s)   ", secs, done, Double(done) / secs).utf8))
            }
        } catch let error as BenchError {
            printError(error.description)
            throw Exit.unreachable
        }
        if !quiet { FileHandle.standardError.write(Data("\n".utf8)) }
        let percentiles: [(String, Double)] = [("p50", 50), ("p90", 90), ("p99", 99), ("p99.9", 99.9)].map {
            ($0.0, result.microseconds(atPercentile: $0.1))
        }
        if jsonOutput {
            var out: ValueSet = [
                "host": .string(options.host), "connections": .int(Int64(connections)),
                "pipeline": .int(Int64(pipeline)),
                "completed": .int(Int64(result.completed)), "failed": .int(Int64(result.failed)),
                "requestsPerSecond": .double(result.requestsPerSecond.rounded()),
                "maxMicroseconds": .double(Double(result.latency.max) / 1000),
            ]
            for (name, value) in percentiles { out[name + "Microseconds"] = .double(value) }
            out["setupP50Microseconds"] = .double(Double(result.setup.valueAtPercentile(50)) / 1000)
            out["tls"] = .bool(tls != nil)
            print(MessageText.json(out, pretty: false))
        } else {
            print(
                "\(options.host) \(package)/\(service) over \(tls == nil ? "plain TCP" : "TLS"): \(connections) connections, pipeline \(pipeline), \(duration) s"
            )
            print(
                String(
                    format: "%d round trips, %d failed, %.0f per second", result.completed, result.failed,
                    result.requestsPerSecond))
            print(
                "latency " + percentiles.map { String(format: "%@ %.1f µs", $0.0, $0.1) }.joined(separator: ", ")
                    + String(format: ", max %.1f µs", Double(result.latency.max) / 1000)
            )
            print(
                String(
                    format: "connection setup (connect to welcome) p50 %.1f µs",
                    Double(result.setup.valueAtPercentile(50)) / 1000))
        }
        if result.failed > 0 { throw Exit.notSuccess }
    }
}

struct Launch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Launch a URI on the host's machine, with the app registered for its scheme.",
        discussion: """
            The host hands the URI to the package that declares its scheme (docs/LAUNCHING.md) \
            and answers with a RemoteLaunchUriStatus, which this prints.

            Examples:
              atrium launch 192.168.1.20 "https://example.org/article"
              atrium launch roman-test://hello \\
                --package 5085ShawnHenry.RomanTestApp_jsjw7knzsgcce
              atrium launch 127.0.0.1:7340 myapp://open --fallback https://example.org \\
                --data '{"Page": 3}'
            """
    )

    @Argument(
        help: ArgumentHelp(
            "The host (host:port, host, or unix:/path) and the URI; the host may be left out.",
            valueName: "host-and-uri"))
    var words: [String]

    @Option(help: "The package that should handle the URI (it must declare the scheme).")
    var package: String?

    @Option(help: ArgumentHelp("A http or https URI to launch when nothing handles the URI.", valueName: "uri"))
    var fallback: String?

    @Option(
        name: .customLong("prefer"),
        help: ArgumentHelp("A package to prefer (repeatable, in order).", valueName: "package"))
    var preferred: [String] = []

    @Option(help: ArgumentHelp("Data for the handler, as a JSON object.", valueName: "json"))
    var data: String?

    @Option(
        help: ArgumentHelp(
            "Seconds to wait for the answer (default: 5 more than the host's response timeout).",
            valueName: "seconds"))
    var timeout: Double?

    @Flag(help: "Print the status as JSON.")
    var jsonOutput = false

    var hostAndURI: (String, String)? {
        switch words.count {
        case 1: ("127.0.0.1:7340", words[0])
        case 2: (words[0], words[1])
        default: nil
        }
    }

    func validate() throws {
        guard let (host, _) = hostAndURI else {
            throw ValidationError("give the URI, optionally after the host: atrium launch [HOST] URI")
        }
        guard AtriumEndpoint(host) != nil || HostOptions.isHostName(host) else {
            throw ValidationError(
                "'\(host)' is not a host: use host:port, host, unix:/path, or a name atrium discover lists")
        }
        if let data { _ = try parsedData(data) }
    }

    func parsedData(_ text: String) throws -> ValueSet {
        do {
            return try MessageText.valueSet(json: text)
        } catch {
            throw ValidationError("--data: \(error)")
        }
    }

    func run() async throws {
        let (host, uri) = hostAndURI!
        let options = HostOptions.parseOrExit(["\(host)"] + (timeout.map { ["--timeout", "\($0)"] } ?? []))
        let connection = try await options.connect()
        let launcher = RemoteLauncher(connection: connection)
        let result = try await reachable {
            try await launcher.launchUri(
                uri,
                options: .init(
                    package: package, fallbackUri: fallback, preferredPackages: preferred,
                    data: try data.map(parsedData)),
                timeout: options.duration
            )
        }
        await connection.close()
        if jsonOutput {
            var out: ValueSet = [
                "status": .int(Int64(result.status.rawValue)), "statusName": .string("\(result.status)"),
            ]
            if let error = result.error { out["error"] = .string(error) }
            print(MessageText.json(out, pretty: false))
        } else {
            print("launch \(uri): \(result.status)" + (result.error.map { " (\($0))" } ?? ""))
        }
        if result.status != .success { throw Exit.notSuccess }
    }
}
