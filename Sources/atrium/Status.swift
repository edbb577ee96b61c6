import ArgumentParser
import AtriumClient
import AtriumValues
import Foundation

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "The host's version, listeners and traffic, and what it holds now: connections, channels, requests, launches, packages.",
        discussion: """
            Asks the host over its local socket, so it runs on the host's machine, as the host's \
            user. Every count is the host's own; with no other client connected, each reads 0 \
            but the connection asking (1 local connection). Requests, connections and launches \
            per second are over the last refresh with --watch, and since the host started \
            without it.

            Examples:
              atrium status
              atrium status --watch             # refreshes every second until Ctrl-C
              atrium status --json
            """
    )

    @OptionGroup var local: LocalOptions

    @Flag(help: "Print the host's answer as JSON.")
    var json = false

    @Flag(help: "Refresh until interrupted, like top.")
    var watch = false

    @Option(help: ArgumentHelp("Seconds between refreshes with --watch.", valueName: "seconds"))
    var interval: Double = 1

    func validate() throws {
        guard interval >= 0.1 else { throw ValidationError("--interval must be at least 0.1 seconds") }
    }

    func run() async throws {
        guard watch else {
            try show(await local.run("host.status"))
            return
        }
        let connection = try await local.connect()
        defer { Task { await connection.close() } }
        let terminal = isatty(STDOUT_FILENO) != 0
        var previous: ValueSet?
        while true {
            let report: ValueSet
            do {
                report = try await connection.admin("host.status")
            } catch let error as AtriumClientError {
                printError(error.message)
                throw Exit.unreachable
            }
            // Home and clear: each refresh replaces the last on a terminal.
            if terminal { print("\u{1B}[H\u{1B}[2J", terminator: "") }
            try show(report, previous: previous)
            previous = report
            if !terminal { print("") }
            fflush(nil)  // each refresh at once, also into a pipe
            try await Task.sleep(for: .milliseconds(Int64(interval * 1000)))
        }
    }

    private func show(_ report: ValueSet, previous: ValueSet? = nil) throws {
        guard !json else {
            print(MessageText.json(report))
            return
        }
        print(Self.text(report, previous: previous))
    }

    /// The report in words; with `previous` (the report before, on the same host), the rates
    /// are over the time between the two, else since the host started.
    static func text(_ report: ValueSet, previous: ValueSet? = nil) -> String {
        func count(_ key: String) -> Int64 { report[key]?.int ?? 0 }
        var lines: [String] = []
        let heap = count("heapInUseBytes")
        let uptime = report["uptimeSeconds"]?.double ?? 0
        lines.append(
            "atriumd \(clean(report["version"]?.string ?? "?")), up \(Self.uptime(uptime))"
                + (heap >= 0 ? "; heap in use \(String(format: "%.1f", Double(heap) / 1_048_576)) MiB" : ""))
        let listeners = report["listeners"]?.array?.strings ?? []
        lines.append(
            "listening    " + (listeners.isEmpty ? "on nothing" : listeners.map(clean).joined(separator: ", ")))
        // Rates: the totals' growth over the time between two reports (a host restarted in
        // between has a shorter uptime: then since it started).
        let earlier = previous.flatMap { previous -> (ValueSet, Double)? in
            guard let then = previous["uptimeSeconds"]?.double, then < uptime else { return nil }
            return (previous, uptime - then)
        }
        func rate(_ key: String) -> String {
            let seconds = earlier?.1 ?? uptime
            let growth = count(key) - (earlier?.0[key]?.int ?? 0)
            return String(format: "%.1f", seconds > 0 ? Double(growth) / seconds : 0)
        }
        let over = earlier.map { String(format: "over the last %.1f s", $0.1) } ?? "since it started"
        lines.append(
            "traffic      \(rate("requestsReceived")) requests/s, \(rate("connectionsAccepted")) connections/s, \(rate("launchesReceived")) launches/s (\(over))"
        )
        lines.append(
            "connections  \(count("connections")) (tcp \(count("tcpConnections")), local \(count("localConnections"))); in memory \(count("connectionsInMemory")); slots free \(count("freeSlots")) of \(count("slots")), holding something \(count("slotsHolding"))"
        )
        lines.append(
            "channels     \(count("channels")); requests waiting for a service \(count("pendingRequests")); messages waiting for a client \(count("outgoingRequests")); launches \(count("launchesInFlight"))"
        )
        let packages = report["packages"]?.array?.maps ?? []
        lines.append("packages     \(packages.count)")
        for package in packages {
            var details: [String] = []
            if let pid = package["pid"]?.int { details.append("pid \(pid)") }
            if let crashes = package["recentCrashes"]?.int, crashes > 0 {
                details.append("\(crashes) crashes in the last minute")
            }
            if let reason = package["reason"]?.string { details.append(clean(reason)) }
            let isolation = package["isolation"]?.string == "process" ? "worker" : "in process"
            lines.append(
                "  \(pad(package["state"]?.string ?? "?", 10)) \(pad(isolation, 10)) \(clean(package["package"]?.string ?? ""))"
                    + (details.isEmpty ? "" : " (\(details.joined(separator: "; ")))"))
        }
        return lines.joined(separator: "\n")
    }

    static func uptime(_ seconds: Double) -> String {
        let total = Int(seconds)
        let (days, hours, minutes) = (total / 86_400, total / 3_600 % 24, total / 60 % 60)
        if days > 0 { return "\(days) d \(hours) h \(minutes) min" }
        if hours > 0 { return "\(hours) h \(minutes) min" }
        if minutes > 0 { return "\(minutes) min \(total % 60) s" }
        return "\(total) s"
    }
}
