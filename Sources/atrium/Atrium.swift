import ArgumentParser
import AtriumClient
import AtriumProtocol
import AtriumValues
import Foundation
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
            Ping.self, Apps.self, Describe.self, Send.self, Get.self, Put.self, Transfers.self, Link.self, Launch.self,
            Discover.self, Bench.self, Pair.self, Pairing.self,
            Devices.self, Status.self, New.self,
        ]
    )
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
    case .transferFailed, .localFile:
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
