import ArgumentParser
import AtriumClient
import AtriumProtocol
import AtriumValues
import Foundation

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
