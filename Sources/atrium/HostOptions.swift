import ArgumentParser
import AtriumClient
import AtriumProtocol
import AtriumTLS
import AtriumValues
import Foundation
import Synchronization

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

    /// The `clientId` of commands whose transfers must be found again by a later run: on
    /// plain TCP to loopback, a transfer belongs to the client's id (CONTRACT section 8).
    static var stableClientId: String { "atrium-cli-\(getuid())" }

    func connect(to address: String? = nil, checkingKnownHost: Bool = true, clientId: String? = nil) async throws
        -> AtriumConnection
    {
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
                to: endpoint, clientId: clientId, clientName: "atrium command line", token: tokenToSend, tls: tls,
                timeout: duration)
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
