import ArgumentParser
import AtriumClient
import AtriumProtocol
import AtriumValues
import Foundation

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
