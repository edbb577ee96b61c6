import ArgumentParser
import AtriumClient
import AtriumProtocol
import AtriumValues
import Foundation

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
