import ArgumentParser
import AtriumClient
import AtriumProtocol
import AtriumValues
import Foundation

struct Pair: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Pair this device with a host, so that it may use the host's services.",
        discussion: """
            Connects over TLS, asks the host's operator to pair, and shows a six-digit \
            verification code: the host shows the same code to its operator (in its log and in \
            `atrium pairing`), who accepts or refuses it there. Compare the two before the \
            operator accepts. Once paired, this client remembers the host's identity and \
            refuses the host if it ever presents another.

            HOST is the host's address, or its name as atrium discover lists it.

            Example:
              atrium pair 192.168.1.20 --name "Ana's laptop"
              atrium pair "Kitchen PC"
            """
    )

    @OptionGroup var options: HostOptions

    @Option(help: ArgumentHelp("The name the host's operator sees for this device.", valueName: "name"))
    var name: String = ProcessInfo.processInfo.hostName

    @Option(help: ArgumentHelp("Seconds to wait for the operator's decision.", valueName: "seconds"))
    var wait: Double = 130

    @Flag(
        help:
            "Pair even though the host presents another identity than the one remembered for its address or its host id (it made a new key on purpose); the new one replaces it once paired, and atrium says which it replaced."
    )
    var forget = false

    func validate() throws {
        if !isAddress(options.host) && HostOptions.isHostName(options.host) {
            // A host found on the network by its name (atrium discover lists them).
            guard !forget else {
                throw ValidationError(
                    "--forget takes the host's address, not a name found on the network: a record naming a host is anyone's to publish"
                )
            }
            guard !options.insecure else { throw ValidationError("pairing is over TLS; --insecure cannot pair") }
        } else {
            guard case .tcp = AtriumEndpoint(options.host)?.address, !options.insecure else {
                throw ValidationError(
                    "pairing is over TLS to a TCP host (a device is its TLS identity); local clients need no pairing")
            }
        }
        guard wait > 0 else { throw ValidationError("--wait takes seconds above 0") }
    }

    func run() async throws {
        // With --forget the host's identity is not checked against the one remembered; it
        // replaces it only if this pairing succeeds.
        let connection = try await options.connect(checkingKnownHost: !forget)
        defer { Task { await connection.close() } }
        guard let identity = connection.hostIdentity else {
            printError("the connection has no TLS identities to pair with")
            throw Exit.unreachable
        }
        // A host id is a hint anyone can claim (hosts advertise theirs): one this client paired
        // with under another identity is not taken over by a pairing without --forget.
        let hostId = connection.welcome.hostId
        let pinned = KnownHosts().identity(ofHostId: hostId).flatMap { $0 == identity ? nil : $0 }
        if let pinned, !forget {
            printError(
                """
                not paired: this host says it is host \(clean(hostId)), which this client paired with before, \
                and presents another identity than that host did:
                  remembered: \(pinned)
                  presented:  \(identity)
                Host ids are public (hosts advertise them), so any host can claim one. If this is that host \
                and it made a new key on purpose, pair again with --forget, which replaces what is remembered; \
                otherwise do not pair with it.
                """)
            throw Exit.notSuccess
        }
        print(
            "Pairing with \(options.host) (\(clean(connection.welcome.hostName))), host identity \(identity)")
        let outcome = try await reachable {
            try await connection.pair(deviceName: name, timeout: .milliseconds(Int64(wait * 1000))) { code in
                print("Verification code: \(code.prefix(3)) \(code.suffix(3))")
                print("Check that the host shows the same code, then have its operator accept the request there")
                print("(atrium pairing accept N). Waiting for the decision...")
                // Out before the wait, also when the output is a file or a pipe (buffered).
                fflush(nil)
            }
        }
        guard outcome.status == .paired else {
            printError("not paired: \(outcome.status)\(outcome.error.map { ": \($0)" } ?? "")")
            throw Exit.notSuccess
        }
        let replaced =
            forget ? (try? KnownHosts().identity(of: connection.endpoint)).flatMap { $0 == identity ? nil : $0 } : nil
        do {
            try KnownHosts().remember(identity, for: connection.endpoint)
            try KnownHosts().remember(identity, forHostId: hostId)
        } catch {
            printError("paired, but the host's identity could not be remembered: \(error)")
            throw Exit.notSuccess
        }
        if let pinned {
            print("Replaced the identity remembered for host \(clean(hostId)) (was \(pinned)).")
        }
        if let replaced, replaced != pinned {
            print("Replaced the identity remembered for \(options.host) (was \(replaced)).")
        }
        print("Paired with \(options.host). This client will refuse it if it ever presents another identity.")
    }
}

/// Options of the operator's commands: the host's local socket.
struct LocalOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The host's local socket. Default: atriumd's own default.", valueName: "path"))
    var socket: String?

    @Option(help: ArgumentHelp("Seconds to wait for each answer.", valueName: "seconds"))
    var timeout: Double = 10

    func validate() throws {
        guard timeout > 0 else { throw ValidationError("--timeout must be above 0 seconds") }
    }

    func connect() async throws -> AtriumConnection {
        let endpoint = socket.map { AtriumEndpoint(.unix(path: $0)) } ?? AtriumEndpoint.defaultLocalSocket
        return try await reachable {
            try await AtriumConnection.connect(
                to: endpoint, clientName: "atrium operator", timeout: .milliseconds(Int64(timeout * 1000)))
        }
    }

    /// Runs `command` on the host and returns its result; a refusal exits with code 1.
    func run(_ command: String, _ arguments: ValueSet = [:]) async throws -> ValueSet {
        let connection = try await connect()
        defer { Task { await connection.close() } }
        do {
            return try await connection.admin(command, arguments)
        } catch let error as AtriumClientError where error.code == .refused {
            printError(error.message)
            throw Exit.notSuccess
        } catch let error as AtriumClientError {
            printError(error.message)
            throw Exit.unreachable
        }
    }
}

struct Pairing: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The host's pairing requests: list them, accept or refuse one (on the host's machine).",
        discussion: """
            Talks to the host over its local socket, so it runs on the host's machine, as the \
            host's user. Compare a request's code with the one the device shows before you \
            accept it.

            Examples:
              atrium pairing                # the requests waiting, with their codes
              atrium pairing accept 3
              atrium pairing refuse 3
            """,
        subcommands: [List.self, Accept.self, Refuse.self],
        defaultSubcommand: List.self
    )

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the pairing requests waiting.")
        @OptionGroup var local: LocalOptions

        func run() async throws {
            let result = try await local.run("pairing.list")
            let requests = result["requests"]?.array?.maps ?? []
            guard !requests.isEmpty else {
                print("no pairing requests waiting")
                return
            }
            print("REQUEST  CODE     DEVICE                ADDRESS          WAITING  IDENTITY")
            for request in requests {
                let code = request["code"]?.string ?? ""
                print(
                    [
                        pad("\(request["request"]?.int ?? 0)", 8), pad("\(code.prefix(3)) \(code.suffix(3))", 8),
                        pad(clean(request["deviceName"]?.string ?? ""), 21), pad(request["address"]?.string ?? "", 16),
                        pad("\(request["waitingSeconds"]?.int ?? 0) s", 7), request["identity"]?.string ?? "",
                    ].joined(separator: " "))
            }
        }
    }

    struct Accept: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Accept a pairing request: the device is paired.")
        @OptionGroup var local: LocalOptions
        @Argument(help: "The request's number, from `atrium pairing`.") var request: Int

        func run() async throws {
            let result = try await local.run("pairing.accept", ["request": .int(Int64(request))])
            print("paired \(clean(result["deviceName"]?.string ?? "the device")) (\(result["identity"]?.string ?? ""))")
        }
    }

    struct Refuse: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Refuse a pairing request.")
        @OptionGroup var local: LocalOptions
        @Argument(help: "The request's number, from `atrium pairing`.") var request: Int

        func run() async throws {
            let result = try await local.run("pairing.refuse", ["request": .int(Int64(request))])
            print(
                "refused \(clean(result["deviceName"]?.string ?? "the device")) (\(result["identity"]?.string ?? ""))")
        }
    }
}

struct Devices: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The devices paired with the host: list them, or revoke one (on the host's machine).",
        discussion: """
            A revoked device is cut off at once: its connections close, and it must pair again.

            Examples:
              atrium devices
              atrium devices revoke 3f2a91c0     # the identity, or its first 8 digits
            """,
        subcommands: [List.self, Revoke.self],
        defaultSubcommand: List.self
    )

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the paired devices.")
        @OptionGroup var local: LocalOptions

        func run() async throws {
            let result = try await local.run("devices.list")
            let devices = result["devices"]?.array?.maps ?? []
            guard !devices.isEmpty else {
                print("no paired devices")
                return
            }
            print("DEVICE                LAST SEEN (UTC)       FROM             IDENTITY")
            for device in devices {
                print(
                    [
                        pad(clean(device["name"]?.string ?? ""), 21),
                        pad(
                            device["lastSeen"]?.date.map {
                                $0.formatted(.iso8601.year().month().day().time(includingFractionalSeconds: false))
                            } ?? "", 21),
                        pad(device["lastAddress"]?.string ?? "", 16), device["identity"]?.string ?? "",
                    ].joined(separator: " "))
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Unpair a device and cut off its connections.")
        @OptionGroup var local: LocalOptions
        @Argument(help: "The device's identity, or at least its first 8 hex digits.") var device: String

        func run() async throws {
            let result = try await local.run("devices.revoke", ["device": .string(device)])
            print("revoked \(clean(result["name"]?.string ?? "the device")) (\(result["identity"]?.string ?? ""))")
        }
    }
}

/// `text` cut or padded to `width` characters, for a column.
func pad(_ text: String, _ width: Int) -> String {
    let cut = text.count > width ? String(text.prefix(width - 1)) + "…" : text
    return cut + String(repeating: " ", count: max(0, width - cut.count))
}

/// Text from the host or a device, made safe to print: control and format characters, which
/// could move the cursor or rewrite a line, become "?".
func clean(_ text: String) -> String {
    String(
        String.UnicodeScalarView(
            text.unicodeScalars.map { scalar in
                let category = scalar.properties.generalCategory
                return category == .control || category == .format ? "?" : scalar
            }))
}
