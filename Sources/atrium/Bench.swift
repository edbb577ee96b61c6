import ArgumentParser
import AtriumBench
import AtriumClient
import AtriumProtocol
import AtriumTLS
import AtriumValues
import Foundation
import NIOSSL

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
